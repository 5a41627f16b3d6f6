"""GTID positions in their two forms: MariaDB's ``domain-server-seq`` list and MySQL's ``uuid:intervals`` set.

Both parse into canonical, comparable values, so that a watermark stores one spelling whatever the server
printed (MySQL wraps long sets over lines; either orders its parts as it likes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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

    def contains(self, gtid: tuple[str, int]) -> bool:
        """True when the transaction (source, number) is in this set."""
        return any(a <= gtid[1] <= b for a, b in dict(self.sources).get(gtid[0], ()))

    def with_gtids(self, gtids: Iterable[tuple[str, int]]) -> MySqlGtidSet:
        """This set and the transactions ``gtids`` (source, number)."""
        merged = {source: list(intervals) for source, intervals in self.sources}
        for source, number in gtids:
            merged.setdefault(source, []).append((number, number))
        return MySqlGtidSet(tuple((source, _merge_intervals(merged[source])) for source in sorted(merged)))

    def without(self, other: MySqlGtidSet) -> MySqlGtidSet:
        """The transactions of this set that ``other`` lacks."""
        theirs = dict(other.sources)
        left = []
        for source, intervals in self.sources:
            rest = []
            for start, end in intervals:
                for a, b in theirs.get(source, ()):
                    if b < start or a > end:
                        continue
                    if a > start:
                        rest.append((start, a - 1))
                    start = b + 1
                    if start > end:
                        break
                if start <= end:
                    rest.append((start, end))
            if rest:
                left.append((source, tuple(rest)))
        return MySqlGtidSet(tuple(left))

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


# How SHOW BINLOG EVENTS lists GTIDs. MariaDB: a transaction's Gtid event reads "BEGIN GTID 0-1-6" (or
# "GTID 0-1-1" for DDL, perhaps followed by " cid=…"); a file's Gtid_list event "[0-1-7,0-2-9,1-2-3]", the last
# GTID of each server in each domain where the file starts. MySQL: a Gtid event reads
# "SET @@SESSION.GTID_NEXT= 'uuid:6'" (tagged: 'uuid:tag:6'); a file's Previous_gtids event is the GTID set where
# the file starts.
_MARIADB_EVENT = re.compile(r"^(?:BEGIN )?GTID (\d+)-(\d+)-(\d+)\b")
_MYSQL_EVENT = re.compile(r"^SET @@SESSION\.GTID_NEXT\s*=\s*'([^']+)'", re.IGNORECASE)

MariaDbGtid = tuple[int, int, int]  # (domain, server_id, seq)
MySqlGtid = tuple[str, int]  # ("uuid" or "uuid:tag", transaction number)


class GtidPositionLost(InvalidWatermark):
    """A GTID position that cannot be found again on this server. ``kind``: ``purged`` (the transactions after it
    are no longer in its binlog) or ``diverged`` (it lacks transactions the position has: they were lost)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def mariadb_event_gtid(info: str) -> MariaDbGtid | None:
    """The (domain, server_id, seq) of a Gtid event's Info text, or None for another text."""
    match = _MARIADB_EVENT.match((info or "").strip())
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def mariadb_gtid_list(info: str) -> tuple[MariaDbGtid, ...]:
    """The GTIDs of a Gtid_list event's Info text (``[0-1-7,0-2-9]``): a domain may appear once per server."""
    text = (info or "").strip()
    if not (text.startswith("[") and text.endswith("]")):
        raise InvalidWatermark(f"Cannot read the Gtid_list {info!r}: expected [domain-server-seq,…].")
    gtids = []
    for part in filter(None, (p.strip() for p in text[1:-1].split(","))):
        match = _MARIADB_GTID.match(part)
        if not match:
            raise InvalidWatermark(f"Cannot read the GTID {part!r} of the Gtid_list {info!r}.")
        gtids.append(tuple(int(g) for g in match.groups()))
    return tuple(gtids)  # type: ignore[arg-type]


def mysql_event_gtid(info: str) -> MySqlGtid | None:
    """The (source, number) of a MySQL Gtid event's Info text; None for another text or an anonymous one."""
    match = _MYSQL_EVENT.match((info or "").strip())
    if not match or match[1].upper() in ("ANONYMOUS", "AUTOMATIC"):
        return None
    ((source, intervals),) = MySqlGtidSet.parse(match[1]).sources
    return source, intervals[0][0]


@dataclass(frozen=True)
class GtidFile:
    """One binlog file as GTID positioning sees it: the GTID state where it starts, and its transactions."""

    name: str
    start: MariaDbGtidPos | MySqlGtidSet  # MariaDB: the highest GTID per domain of its Gtid_list
    transactions: tuple[tuple[int, MariaDbGtid | MySqlGtid], ...]  # (offset of the GTID event, the GTID), in order
    start_gtids: tuple[MariaDbGtid, ...] = ()  # MariaDB: its Gtid_list as written, every server of every domain

    @classmethod
    def mariadb(cls, name: str, gtid_list: str, events: list[tuple[int, str]]) -> GtidFile:
        """From a file's Gtid_list Info and its events as (offset, Info)."""
        listed = mariadb_gtid_list(gtid_list)
        last: dict[int, MariaDbGtid] = {}
        for gtid in listed:
            if gtid[0] not in last or gtid[2] > last[gtid[0]][2]:
                last[gtid[0]] = gtid
        return cls(name, MariaDbGtidPos(tuple(last[d] for d in sorted(last))),
                   tuple((offset, g) for offset, info in events if (g := mariadb_event_gtid(info))), listed)

    @classmethod
    def mysql(cls, name: str, previous_gtids: str, events: list[tuple[int, str]]) -> GtidFile:
        """From a file's Previous_gtids Info and its events as (offset, Info)."""
        return cls(name, MySqlGtidSet.parse(previous_gtids),
                   tuple((offset, g) for offset, info in events if (g := mysql_event_gtid(info))))


def mysql_gtid_at(file: GtidFile, position: int) -> MySqlGtidSet:
    """The GTID set of a MySQL server at ``position`` in ``file``: MySQL has no function that tells it."""
    if not isinstance(file.start, MySqlGtidSet):
        raise TypeError(f"{file.name} is a MariaDB binlog file: its GTID state is its Gtid_list, not a MySQL set.")
    return file.start.with_gtids(g for offset, g in file.transactions
                                 if offset < position and isinstance(g[0], str))  # MySQL's (uuid, number)


def first_file(position: MariaDbGtidPos | MySqlGtidSet, starts: list[tuple[str, MariaDbGtidPos | MySqlGtidSet]]) -> int:
    """The index of the binlog file to look for ``position`` in: the last one that begins at or before it.

    ``starts`` are the server's files, oldest first, each with the GTID state it begins at. Raises
    GtidPositionLost (``purged``) when the first file begins after the position.
    """
    if not position.covers(starts[0][1]):  # type: ignore[arg-type]
        raise GtidPositionLost("purged", (
            f"This server's binlog begins at GTID {starts[0][1]} ({starts[0][0]}), after the position "
            f"{position}: the transactions in between are no longer on it."))
    return max(i for i, (_, start) in enumerate(starts) if position.covers(start))  # type: ignore[arg-type]


def start_after(position: MariaDbGtidPos | MySqlGtidSet, files: list[GtidFile]) -> tuple[str, int] | None:
    """Where a server's binlog continues after the GTID ``position`` (taken on another server, before a
    failover): the file and offset of the first transaction the position does not hold, or None when the
    server has nothing newer.

    ``files`` are the server's binlog files, oldest first. The read starts in the last file that begins at or
    before the position. Transactions the position holds may follow in it (a replica applies in parallel):
    read again, they change nothing the position's copy lacks. Raises GtidPositionLost when the server's binlog
    begins after the position (the transactions in between were purged), or when the server lacks a
    transaction the position holds (it was lost in the failover: the copy has changes the source has not).
    """
    if not files:
        return None
    first = first_file(position, [(f.name, f.start) for f in files])
    if isinstance(position, MariaDbGtidPos):
        covered = {d: seq for d, _, seq in position.domains}

        def holds(gtid: Any) -> bool:
            return bool(gtid[2] <= covered.get(gtid[0], 0))

        seen = set(files[first].start_gtids) | {g for f in files[first:] for _, g in f.transactions}
        lacking = [f"{d}-{s}-{q}" for d, s, q in position.domains if (d, s, q) not in seen]
    else:
        holds = position.contains
        held = files[first].start.with_gtids(g for f in files[first:] for _, g in f.transactions)  # type: ignore
        lacking = [str(missing)] if (missing := position.without(held)).sources else []
    if lacking:
        raise GtidPositionLost("diverged", (
            f"This server has not got the transactions {', '.join(lacking)} of the position {position}: they "
            "were lost when it took over, so the copy holds changes this server never had."))
    for file in files[first:]:
        for offset, gtid in file.transactions:
            if not holds(gtid):
                return file.name, offset
    return None
