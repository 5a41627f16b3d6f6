"""Values as the binlog reader decodes them, brought to the form the snapshot SELECT gives for the same column.

python-mysql-replication returns SET as a Python set and BIT as a string of 0s and 1s; PyMySQL returns SET as
``a,b`` in definition order and BIT as big-endian bytes. Both ways in must land the same value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_SET = re.compile(r"^\s*set\s*\((.*)\)\s*$", re.I | re.S)
_BIT = re.compile(r"^\s*bit\s*(?:\((\d+)\))?\s*$", re.I)


def _set_members(column_type: str) -> list[str]:
    body = _SET.match(column_type)[1]
    return [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", body)]


def converter(column_type: str) -> Callable[[Any], Any] | None:
    """A function that normalises binlog values of this column type, or None when they need nothing."""
    if _SET.match(column_type):
        order = {member: i for i, member in enumerate(_set_members(column_type))}

        def set_text(value: Any) -> Any:
            if isinstance(value, (set, frozenset)):
                return ",".join(sorted(value, key=lambda m: order.get(m, len(order))))
            return value

        return set_text
    bit = _BIT.match(column_type)
    if bit:
        width = (int(bit[1] or 1) + 7) // 8

        def bit_bytes(value: Any) -> Any:
            if isinstance(value, str):
                return int(value, 2).to_bytes(width, "big")
            if isinstance(value, int):
                return value.to_bytes(width, "big")
            return value

        return bit_bytes
    return None
