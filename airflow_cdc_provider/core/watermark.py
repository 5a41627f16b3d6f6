"""The binlog watermark: where a capture stands in a server's binlog.

A small immutable value that goes into XCom and the run ledger as JSON. Watermarks of one server order by
binlog file sequence number, then position, so ``binlog.999999`` comes before ``binlog.1000000`` (string order
does not). Watermarks of two servers (before and after a failover) order by their GTID positions, if they have
them.
"""

from __future__ import annotations

import re

from pydantic import ConfigDict, ValidationError, model_validator

from airflow_cdc_provider.core.errors import InvalidWatermark
from airflow_cdc_provider.core.gtid import MariaDbGtidPos, MySqlGtidSet
from airflow_cdc_provider.core.model import Model

_BINLOG_FILE = re.compile(r"^(?P<base>.+)\.(?P<seq>\d+)$")


def split_binlog_file(name: str) -> tuple[str, int]:
    """Split ``binlog.000012`` into its base name and sequence number."""
    match = _BINLOG_FILE.match(name or "")
    if not match:
        raise InvalidWatermark(
            f"The binlog file name {name!r} does not end in a sequence number like binlog.000012."
        )
    return match["base"], int(match["seq"])


class Watermark(Model):
    """A position in one server's binlog, with the GTID state at that position when the server has one.

    ``server_id`` and ``server_uuid`` (MySQL only; MariaDB has none) identify the server the position
    belongs to: a file and position mean nothing on another server.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    file: str
    position: int
    server_id: int
    gtid: str | None = None
    server_uuid: str | None = None

    @model_validator(mode="after")
    def _valid(self) -> Watermark:
        split_binlog_file(self.file)
        if self.position < 4:
            # Every binlog file starts with a 4-byte magic number; no event starts before position 4.
            raise InvalidWatermark(f"The binlog position {self.position!r} in {self.file} is not an integer >= 4.")
        return self

    @property
    def sequence(self) -> int:
        return split_binlog_file(self.file)[1]

    @property
    def coordinate(self) -> tuple[int, int]:
        """(file sequence number, position): the key that orders positions across file rotations."""
        return (self.sequence, self.position)

    def same_server(self, other: Watermark) -> bool:
        if self.server_uuid and other.server_uuid:
            return self.server_uuid == other.server_uuid
        return self.server_id == other.server_id and split_binlog_file(self.file)[0] == split_binlog_file(other.file)[0]

    def gtid_position(self) -> MariaDbGtidPos | MySqlGtidSet | None:
        """The GTID state as a comparable value: MySQL's set (its servers have a uuid) or MariaDB's position."""
        if not self.gtid:
            return None
        return MySqlGtidSet.parse(self.gtid) if self.server_uuid else MariaDbGtidPos.parse(self.gtid)

    def _order(self, other: Watermark) -> int:
        if self.same_server(other):
            return (self.coordinate > other.coordinate) - (self.coordinate < other.coordinate)
        mine, theirs = self.gtid_position(), other.gtid_position()
        if mine is not None and theirs is not None and type(mine) is type(theirs):
            later, earlier = mine.covers(theirs), theirs.covers(mine)  # type: ignore[arg-type]
            if later or earlier:
                return later - earlier
        raise InvalidWatermark(
            f"Cannot order watermarks of different servers without GTID positions that contain one another: {self} "
            f"(server id {self.server_id}) and {other} (server id {other.server_id}). A file and position are valid "
            "only on the server that wrote them; after moving to another server without GTIDs, take a fresh snapshot."
        )

    def __lt__(self, other: Watermark) -> bool:
        return self._order(other) < 0

    def __le__(self, other: Watermark) -> bool:
        return self._order(other) <= 0

    def __gt__(self, other: Watermark) -> bool:
        return self._order(other) > 0

    def __ge__(self, other: Watermark) -> bool:
        return self._order(other) >= 0

    @classmethod
    def from_text(cls, text: str) -> Watermark:
        """A stored watermark, or an InvalidWatermark that shows it."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise InvalidWatermark(f"The stored watermark {text!r} is not a watermark: {exc}") from None

    def __str__(self) -> str:
        gtid = f" gtid={self.gtid}" if self.gtid else ""
        return f"{self.file}:{self.position}{gtid}"
