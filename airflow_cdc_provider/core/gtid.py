"""GTID positions in their two forms: MariaDB's ``domain-server-seq`` list and MySQL's ``uuid:intervals`` set.

Both parse into canonical, comparable values, so that a watermark stores one spelling whatever the server
printed (MySQL wraps long sets over lines; either orders its parts as it likes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_cdc_provider.core.errors import InvalidWatermark

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TAG = re.compile(r"^[a-z_][a-z0-9_]{0,31}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class MariaDbGtidPos:
    """MariaDB's ``gtid_binlog_pos``: per replication domain, the last GTID (server id, sequence number)."""

    domains: tuple[tuple[int, int, int], ...]  # (domain, server_id, seq), sorted by domain

    @classmethod
    def parse(cls, text: str) -> MariaDbGtidPos:
        seen: dict[int, tuple[int, int, int]] = {}
        for part in filter(None, (p.strip() for p in (text or "").split(","))):
            match = _MARIADB_GTID.match(part)
            if not match:
                raise InvalidWatermark(
                    f"Cannot read the MariaDB GTID {part!r} in {text!r}: expected domain-server-seq, such as 0-1-17."
                )
            domain, server, seq = (int(g) for g in match.groups())
            if domain in seen:
                raise InvalidWatermark(f"The MariaDB GTID position {text!r} names domain {domain} twice.")
            seen[domain] = (domain, server, seq)
        return cls(tuple(seen[d] for d in sorted(seen)))

    def covers(self, other: MariaDbGtidPos) -> bool:
        """True when every domain of ``other`` is at or before this position's sequence in that domain."""
        mine = {d: seq for d, _, seq in self.domains}
        return all(d in mine and mine[d] >= seq for d, _, seq in other.domains)

    def __str__(self) -> str:
        return ",".join(f"{d}-{s}-{q}" for d, s, q in self.domains)


@dataclass(frozen=True)
class MySqlGtidSet:
    """MySQL's ``gtid_executed``: per source (uuid, optional tag), the closed intervals of transaction numbers."""

    sources: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]  # ("uuid[:tag]", ((start, end), ...)), sorted

    @classmethod
    def parse(cls, text: str) -> MySqlGtidSet:
        merged: dict[str, list[tuple[int, int]]] = {}
        for part in filter(None, (p.strip() for p in (text or "").replace("\n", "").split(","))):
            fields = [f.strip() for f in part.split(":")]
            uuid = fields[0].lower()
            if not _UUID.match(uuid) or len(fields) < 2:
                raise InvalidWatermark(
                    f"Cannot read the MySQL GTID set part {part!r} in {text!r}: expected uuid:interval[:interval…], "
                    "such as 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5."
                )
            source = uuid
            for field in fields[1:]:
                interval = _INTERVAL.match(field)
                if interval is None:
                    if _TAG.match(field.lower()):  # MySQL 8.3+ tagged GTIDs: uuid:tag:intervals
                        source = f"{uuid}:{field.lower()}"
                        continue
                    raise InvalidWatermark(f"Cannot read the GTID interval {field!r} in {part!r}.")
                start = int(interval[1])
                end = int(interval[2]) if interval[2] else start
                if start < 1 or end < start:
                    raise InvalidWatermark(f"The GTID interval {field!r} in {part!r} is empty or starts below 1.")
                merged.setdefault(source, []).append((start, end))
        return cls(tuple((source, _merge_intervals(merged[source])) for source in sorted(merged)))

    def covers(self, other: MySqlGtidSet) -> bool:
        """True when every transaction of ``other`` is in this set."""
        mine = dict(self.sources)
        for source, intervals in other.sources:
            have = mine.get(source, ())
            for start, end in intervals:
                if not any(a <= start and end <= b for a, b in have):
                    return False
        return True

    def __str__(self) -> str:
        return ",".join(
            source + "".join(f":{a}" if a == b else f":{a}-{b}" for a, b in intervals)
            for source, intervals in self.sources
        )


def _merge_intervals(intervals: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def canonical_gtid(text: str | None, mariadb: bool) -> str | None:
    """The canonical spelling of a server's GTID position, or None when the server has none."""
    if text is None:
        return None
    value = MariaDbGtidPos.parse(text) if mariadb else MySqlGtidSet.parse(text)
    return str(value) or None


# MariaDB's SHOW BINLOG EVENTS: a transaction's Gtid event reads "BEGIN GTID 0-1-6" (or "GTID 0-1-1" for DDL,
# perhaps followed by " cid=…"); a file's Gtid_list event "[0-1-7,1-2-3]", its GTID state where the file starts.
_GTID_EVENT = re.compile(r"^(?:BEGIN )?GTID (\d+)-(\d+)-(\d+)\b")


def mariadb_event_gtid(info: str) -> tuple[int, int, int] | None:
    """The (domain, server_id, seq) of a Gtid event's Info text, or None for another text."""
    match = _GTID_EVENT.match((info or "").strip())
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def mariadb_gtid_list(info: str) -> MariaDbGtidPos:
    """The GTID state of a Gtid_list event's Info text (``[0-1-7,1-2-3]``)."""
    text = (info or "").strip()
    if not (text.startswith("[") and text.endswith("]")):
        raise InvalidWatermark(f"Cannot read the Gtid_list {info!r}: expected [domain-server-seq,…].")
    return MariaDbGtidPos.parse(text[1:-1])


def mariadb_start_after(position: MariaDbGtidPos, files: list[tuple[str, MariaDbGtidPos]],
                        events: dict[str, list[tuple[int, str]]]) -> tuple[str, int] | None:
    """Where a server's binlog continues after ``position``: the file and offset of the first transaction whose
    GTID it does not cover, or None when the binlog holds none (the server has nothing newer).

    ``files`` are the server's binlog files in order with the GTID state each starts at (its Gtid_list);
    ``events[file]`` that file's Gtid events as (offset, Info). The file to read is the last one that starts
    at or before ``position``; a server whose first file starts after it lacks transactions in between (they
    were purged), which is an error.
    """
    if not files:
        return None
    if not position.covers(files[0][1]):
        raise InvalidWatermark(f"The binlog starts at GTID {files[0][1]}, after the position {position}: the "
                               "transactions in between are no longer on this server.")
    covered = {d: seq for d, _, seq in position.domains}
    first = max(i for i, (_, start) in enumerate(files) if position.covers(start))
    for name, _ in files[first:]:
        for offset, info in events.get(name, ()):
            gtid = mariadb_event_gtid(info)
            if gtid is not None and gtid[2] > covered.get(gtid[0], 0):
                return name, offset
    return None
