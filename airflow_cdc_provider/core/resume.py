"""Where a capture goes on in a server's binlog from its watermark, or why it cannot: decided from what the
source hook found on the server (its binlog files, its position and GTID state now, and, for a watermark of
another server, where its GTID position lies in this server's binlog).

The decision is a typed value (``Unreadable``: a kind and the facts behind it); the words a user reads are
composed here from it, and the callers act on the kind.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from airflow_cdc_provider.core.errors import WatermarkNotReadable
from airflow_cdc_provider.core.gtid import GtidPositionLost
from airflow_cdc_provider.core.watermark import Watermark, split_binlog_file


@dataclass(frozen=True)
class BinlogFile:
    name: str
    size: int


@dataclass(frozen=True)
class BinlogFacts:
    """What the source hook found on the server, all asked at one time.

    ``found`` holds, for each watermark of another server that has a GTID position to look for, where this
    server's binlog continues after it (its current position when it has nothing newer), or why the position
    cannot be found here.
    """

    current: Watermark
    files: tuple[BinlogFile, ...]
    retention: tuple[tuple[str, str | None], ...] = ()  # the server's binlog retention settings, as it names them
    found: Mapping[Watermark, Watermark | GtidPositionLost] = field(default_factory=dict, hash=False)


class UnreadableKind(enum.StrEnum):
    SERVER = "server"  # taken on another server, and one of the two has no GTID position to find the place by
    DIVERGED = "diverged"  # taken on another server, which lacks transactions the watermark holds
    PURGED = "purged"  # its binlog file, or the transactions after its GTID position, are gone
    PAST_END = "past_end"  # past the end of its file here: it does not belong to this server's binlog


_PURGED_WAY_ON = ("Set `on_purged_binlog: heal` to have such a run bring the table level by a diff, or trigger a run "
                  "with the parameter fresh_snapshot=true (or set `on_purged_binlog: snapshot` to take one in such a "
                  "run); and keep binlogs longer than the time between two runs.")
_SERVER_WAY_ON = ("Trigger a run with fresh_snapshot=true, or set `on_server_change: snapshot` to take one in such a "
                  "run.")
_DIVERGED_WAY_ON = ("Trigger a run with fresh_snapshot=true (or set `on_server_change: snapshot` to take one in such "
                    "a run).")


@dataclass(frozen=True)
class Unreadable:
    """Why the binlog cannot be read from ``watermark`` on the server of ``facts``.

    ``at`` is the watermark's place on this server when one was found (the watermark itself, or the GTID
    position of one from another server) and the file there is purged or too short. ``lost`` is why the GTID
    search failed (``DIVERGED``, or ``PURGED`` after a failover).
    """

    kind: UnreadableKind
    watermark: Watermark
    facts: BinlogFacts = field(repr=False)
    at: Watermark | None = None
    lost: str | None = None

    @property
    def reason(self) -> str:
        """What is wrong, with the values: the message without the way on."""
        current = self.facts.current
        moved = (f"The watermark {self.watermark} was taken on server id {self.watermark.server_id} (uuid "
                 f"{self.watermark.server_uuid}), but this server is id {current.server_id} (uuid "
                 f"{current.server_uuid}) with binlog {current.file}")
        if self.kind is UnreadableKind.SERVER:
            without = "the watermark has" if self.watermark.gtid is None else "this server has"
            return (f"{moved}. A file and position mean nothing on another server, and {without} no GTID position "
                    "to find the place by (MySQL: gtid_mode=ON).")
        if self.lost is not None:
            return f"{moved}, and its GTID {self.watermark.gtid} was looked for there. {self.lost}"
        at = self.at or self.watermark
        files = self.facts.files
        if self.kind is UnreadableKind.PAST_END:
            size = next((f.size for f in files if f.name == at.file), 0)
            return (f"The watermark {at} is past the end of {at.file}, which has {size} bytes: it does not belong to "
                    "this server's binlog.")
        kept = f"{files[0].name} … {files[-1].name}" if files else "no binlog files"
        older = at.sequence < split_binlog_file(files[0].name)[1] if files else True
        settings = ", ".join(f"{name}={value}" for name, value in self.facts.retention)
        return (f"The binlog file {at.file} of the watermark {at} is no longer on the server (it keeps "
                f"{kept}){': it was purged' if older else ''}. The server's retention setting is {settings}.")

    @property
    def way_on(self) -> str:
        """What the user can do about it ("" when nothing but a look at the configuration helps)."""
        return {UnreadableKind.SERVER: _SERVER_WAY_ON, UnreadableKind.DIVERGED: _DIVERGED_WAY_ON,
                UnreadableKind.PURGED: _PURGED_WAY_ON, UnreadableKind.PAST_END: ""}[self.kind]

    @property
    def message(self) -> str:
        return f"{self.reason} {self.way_on}".rstrip()

    def error(self) -> WatermarkNotReadable:
        return WatermarkNotReadable(self.message)


def needs_gtid_search(watermark: Watermark, current: Watermark) -> bool:
    """Whether ``watermark`` is of another server than ``current``'s and both have a GTID position of the same
    kind: then its place on this server is looked for by GTID (the hook reads this server's binlog for it)."""
    if watermark.same_server(current):
        return False
    return not (watermark.gtid is None or current.gtid is None
                or (watermark.server_uuid is None) != (current.server_uuid is None))


def read_position(watermark: Watermark, facts: BinlogFacts) -> Watermark | Unreadable:
    """Where this server's binlog is read from to go on from ``watermark``, or why it cannot be.

    The place is the watermark itself; or, for one taken on another server (before a failover), the same GTID
    position found in this server's binlog (``facts.found``).
    """
    at = watermark
    if not watermark.same_server(facts.current):
        if not needs_gtid_search(watermark, facts.current):
            return Unreadable(UnreadableKind.SERVER, watermark, facts)
        if watermark not in facts.found:
            raise ValueError(f"The GTID position of the watermark {watermark} of another server was not looked for "
                             "on this server: the hook gathers it for every watermark that needs_gtid_search.")
        found = facts.found[watermark]
        if isinstance(found, GtidPositionLost):
            kind = UnreadableKind.PURGED if found.kind == "purged" else UnreadableKind.DIVERGED
            return Unreadable(kind, watermark, facts, lost=str(found))
        at = found
    sizes = {f.name: f.size for f in facts.files}
    if at.file not in sizes:
        return Unreadable(UnreadableKind.PURGED, watermark, facts, at=at)
    if at.position > sizes[at.file]:
        return Unreadable(UnreadableKind.PAST_END, watermark, facts, at=at)
    return at


def read_positions(watermarks: Sequence[Watermark], facts: BinlogFacts) -> list[Watermark | Unreadable]:
    """``read_position`` of each watermark."""
    return [read_position(w, facts) for w in watermarks]
