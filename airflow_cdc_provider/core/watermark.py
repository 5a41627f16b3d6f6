"""The binlog watermark: where a capture stands in a server's binlog.

A small immutable value that goes into XCom and the run ledger as JSON. Watermarks order by binlog file
sequence number, then position, so ``binlog.999999`` comes before ``binlog.1000000`` (string order does not).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from functools import total_ordering
from typing import Any

from airflow_cdc_provider.core.errors import InvalidWatermark

_BINLOG_FILE = re.compile(r"^(?P<base>.+)\.(?P<seq>\d+)$")
_FIELDS = {"file": str, "position": int, "gtid": (str, type(None)), "server_id": int, "server_uuid": (str, type(None))}


def split_binlog_file(name: str) -> tuple[str, int]:
    """Split ``binlog.000012`` into its base name and sequence number."""
    match = _BINLOG_FILE.match(name or "")
    if not match:
        raise InvalidWatermark(
            f"The binlog file name {name!r} does not end in a sequence number like binlog.000012."
        )
    return match["base"], int(match["seq"])


@total_ordering
@dataclass(frozen=True)
class Watermark:
    """A position in one server's binlog, with the GTID state at that position when the server has one.

    ``server_id`` and ``server_uuid`` (MySQL only; MariaDB has none) identify the server the position
    belongs to: a file and position mean nothing on another server.
    """

    file: str
    position: int
    server_id: int
    gtid: str | None = None
    server_uuid: str | None = None

    def __post_init__(self) -> None:
        split_binlog_file(self.file)
        if isinstance(self.position, bool) or not isinstance(self.position, int) or self.position < 4:
            # Every binlog file starts with a 4-byte magic number; no event starts before position 4.
            raise InvalidWatermark(f"The binlog position {self.position!r} in {self.file} is not an integer >= 4.")

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

    def _comparable(self, other: object) -> Watermark:
        if not isinstance(other, Watermark):
            return NotImplemented  # type: ignore[return-value]
        if not self.same_server(other):
            raise InvalidWatermark(
                f"Cannot order watermarks of different servers: {self} and {other}. A watermark is valid only "
                "on the server that wrote it; after moving to another server, take a fresh snapshot."
            )
        return other

    def __lt__(self, other: object) -> bool:
        other = self._comparable(other)
        if other is NotImplemented:
            return NotImplemented
        return self.coordinate < other.coordinate

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any) -> Watermark:
        if not isinstance(data, dict):
            raise InvalidWatermark(f"A watermark must be a JSON object, got {data!r}.")
        unknown = set(data) - set(_FIELDS)
        missing = {"file", "position", "server_id"} - set(data)
        if unknown or missing:
            raise InvalidWatermark(
                f"The watermark {data!r} has unknown fields {sorted(unknown)} or lacks {sorted(missing)}; "
                f"expected the fields {sorted(_FIELDS)}."
            )
        for name, value in data.items():
            if not isinstance(value, _FIELDS[name]) or isinstance(value, bool):
                raise InvalidWatermark(f"The watermark field {name!r} has the wrong type: {value!r}.")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> Watermark:
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise InvalidWatermark(f"The watermark {text!r} is not valid JSON: {exc}.") from None
        return cls.from_dict(data)

    def __str__(self) -> str:
        gtid = f" gtid={self.gtid}" if self.gtid else ""
        return f"{self.file}:{self.position}{gtid}"
