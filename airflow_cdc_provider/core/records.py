"""The raw record format: one binlog row change per line, readable from either end.

A raw file is UTF-8 text. Its first line is a header, ``#cdc-raw 1 {json}``, naming the table, its columns
and its key. Every other line is one record::

    OP \\t UID \\t SEQ:POS:ROW \\t [v1, v2, …]

- ``OP`` is one letter: ``I`` insert, ``U`` update (the after image), ``D`` delete (the before image), ``B`` the
  before image of the update ``U`` on the next line, at the same coordinate with the same uid (an update that keeps
  its key; written only for a table whose changelog has ``mode: all``). A key change is a ``D`` of the old key and
  a ``U`` of the new one, at one coordinate.
- ``UID`` is 32 hex digits, the md5 of the key values in the canonical encoding below. Op and uid sit at fixed
  offsets, so replay can pick them out of a block of lines without parsing the rest.
- ``SEQ:POS:ROW`` is the binlog file sequence number, the position of the row event and the row's index in it:
  the order of the change.
- The values are a JSON array in the header's column order. JSON escapes every newline, tab and control
  character, so a value can never break a line (the seed's plain comma text could not be read back).
  Types JSON lacks are tagged: ``{"d": "1.50"}`` decimal, ``{"b": base64}`` bytes, ``{"ts": iso}`` datetime,
  ``{"dt": iso}`` date, ``{"td": microseconds}`` time (a duration). NULL is ``null``, apart from ``""``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from json.encoder import py_encode_basestring as _py_encode_string
from typing import Any

from airflow_cdc_provider.core.errors import CdcError

HEADER_PREFIX = "#cdc-raw 1 "
OPS = ("I", "U", "D", "B")
UID_START, UID_END = 2, 34  # OP, tab, 32 hex digits


class CorruptRawFile(CdcError):
    """A raw file that cannot be read back: names the file and the line."""

    def __init__(self, path: object, line: int | None, problem: str):
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(
            f"The raw file {where} is corrupt: {problem}. Nothing was written. Delete the raw files of this run "
            "and run its extraction again: they are re-read from the binlog."
        )
        self.path, self.line = path, line


def _tag(value: Any) -> Any:
    """The tagged JSON form of a value JSON has no type for; called by the encoder only for those."""
    if isinstance(value, Decimal):
        return {"d": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {"ts": value.isoformat()}
    if isinstance(value, dt.date):
        return {"dt": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"td": (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds}
    raise TypeError(f"Cannot encode a value of type {type(value).__name__}: {value!r}")


def encode_value(value: Any) -> Any:
    """A JSON-able form of a column value that keeps its type."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    return _tag(value)


# The C version when the interpreter has it (typeshed does not declare it).
_encode_string: Callable[[str], str] = getattr(json.encoder, "c_encode_basestring", None) or _py_encode_string

# The C encoder handles None, str, int and float itself and calls _tag for the rest.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_tag, allow_nan=False)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "d": Decimal,
    # a2b_base64 reads an ASCII str in place (b64decode would copy it to bytes first: a BLOB of 200 MB costs
    # 270 MB more); it skips characters outside the alphabet as b64decode does.
    "b": binascii.a2b_base64,
    "ts": dt.datetime.fromisoformat,
    "dt": dt.date.fromisoformat,
    "td": lambda us: dt.timedelta(microseconds=us),
}


def _decode_object(obj: dict[str, Any]) -> Any:
    if len(obj) == 1:
        ((tag, raw),) = obj.items()
        decoder = _DECODERS.get(tag)
        if decoder is not None:
            return decoder(raw)
    raise ValueError(f"unknown tagged value {obj!r}")


_FAST: dict[type, Callable[[Any], str]] = {
    type(None): lambda v: "null",
    int: str,
    str: lambda v: _encode_string(v),
    Decimal: lambda v: f'{{"d":"{v}"}}',
    dt.datetime: lambda v: f'{{"ts":"{v.isoformat()}"}}',
    dt.date: lambda v: f'{{"dt":"{v.isoformat()}"}}',
    # Base64 needs no JSON escaping: a BLOB of hundreds of megabytes is not scanned and copied once more for it.
    bytes: lambda v: f'{{"b":"{base64.b64encode(v).decode("ascii")}"}}',
}


def encode_values(values: Sequence[Any]) -> str:
    """The JSON array of ``values``, tagged where JSON has no type (see the module's docstring).

    Spelt value by value for the common types (a row is encoded for every change extracted, so this is on
    the hot path); anything else goes to the JSON encoder, which gives the same text.
    """
    fast = _FAST
    try:
        return "[" + ",".join([fast[type(v)](v) for v in values]) + "]"
    except KeyError:
        return _ENCODER.encode(list(values))


_DECODER = json.JSONDecoder(object_hook=_decode_object)


def decode_values(text: str) -> list[Any]:
    values = _DECODER.decode(text)
    if not isinstance(values, list):
        raise ValueError("the values are not a JSON array")
    return values


def key_uid(key_values: Sequence[Any]) -> str:
    """md5 of the key values in the canonical encoding: the same key gives the same uid from any source."""
    if len(key_values) == 1:
        # The common single int or string key, spelt exactly as encode_values would, without its overhead.
        value = key_values[0]
        if type(value) is int:
            return hashlib.md5(b"[%d]" % value).hexdigest()
        if type(value) is str:
            return hashlib.md5(f"[{_encode_string(value)}]".encode()).hexdigest()
    return hashlib.md5(encode_values(key_values).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class RawRecord:
    op: str
    uid: str
    coordinate: tuple[int, int, int]  # binlog file sequence number, event position, row index
    values: tuple[Any, ...]


def format_record(op: str, uid: str, coordinate: tuple[int, int, int], values: Sequence[Any]) -> str:
    seq, pos, row = coordinate
    return f"{op}\t{uid}\t{seq}:{pos}:{row}\t{encode_values(values)}\n"


def parse_record(line: str, path: object = "<raw>", line_number: int | None = None) -> RawRecord:
    """Parse one record line (with or without its newline); CorruptRawFile names the file and line."""
    try:
        op, uid, coordinate, payload = line.rstrip("\n").split("\t", 3)
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}")
        if len(uid) != 32 or any(c not in "0123456789abcdef" for c in uid):
            raise ValueError(f"the uid {uid!r} is not 32 hex digits")
        seq, pos, row = (int(part) for part in coordinate.split(":"))
        return RawRecord(op, uid, (seq, pos, row), tuple(decode_values(payload)))
    except (ValueError, TypeError) as exc:
        raise CorruptRawFile(path, line_number, f"{exc} in {line[:200]!r}") from None


@dataclass(frozen=True)
class RawHeader:
    """What a raw file holds: the table, its columns (name and MySQL column type) and its key columns: none for
    a table whose whole row is its identity (``core.keys.WHOLE_ROW``)."""

    table: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]

    def format(self) -> str:
        body = {"table": self.table, "columns": [list(c) for c in self.columns], "key": list(self.key)}
        return HEADER_PREFIX + json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n"

    @classmethod
    def parse(cls, line: str, path: object = "<raw>") -> RawHeader:
        if not line.startswith(HEADER_PREFIX):
            raise CorruptRawFile(path, 1, f"the first line is not a `{HEADER_PREFIX.strip()}` header")
        try:
            body = json.loads(line[len(HEADER_PREFIX) :])
            columns = tuple((str(n), str(t)) for n, t in body["columns"])
            return cls(str(body["table"]), columns, tuple(body["key"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRawFile(path, 1, f"the header cannot be read ({exc})") from None

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    @property
    def whole_row(self) -> bool:
        return not self.key

    @property
    def identity(self) -> tuple[str, ...]:
        """The columns that identify a row: its key's, or every column of a table with none."""
        return self.key or self.column_names

    def key_indexes(self) -> tuple[int, ...]:
        names = self.column_names
        return tuple(names.index(k) for k in self.key)
