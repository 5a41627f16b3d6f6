"""Key ranges of a snapshot read on several connections at once (``stages.snapshot``).

A table whose key begins with an integer column is cut by that column's values into ranges of about equal
width, each read in keyset chunks of its own. The cut is made from MIN and MAX read after the snapshot's
watermark: a row the read must have was there when the watermark was taken and is still there (a row deleted
or moved since is in the binlog after the watermark, whose replay settles it). The first range is open below
and the last open above all the same, so that no row of the table falls between them.

There are more ranges than readers (``RANGES_PER_READER``): a reader that finishes early takes the next range,
so one slow range does not leave the other readers idle at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_cdc_provider.core.model import Model

RANGES_PER_READER = 4


class KeyRange(Model):
    """The rows whose first key column is ``>= low`` and ``< high``; None: open on that side."""

    low: int | None
    high: int | None

    def bounds(self) -> list[int]:
        """The values of the range's conditions (``conditions``), in their order."""
        return [v for v in (self.low, self.high) if v is not None]

    def conditions(self, column: str) -> list[str]:
        """SQL conditions on ``column`` (an identifier already quoted), a ``%s`` for each bound."""
        return [f"{column} {op} %s" for op, v in ((">=", self.low), ("<", self.high)) if v is not None]


def split_key_space(low: int, high: int, readers: int, chunk_rows: int) -> tuple[KeyRange, ...]:
    """[low, high] cut into ranges for ``readers`` readers: ``RANGES_PER_READER`` per reader, none narrower than
    ``chunk_rows`` key values (a range holds at most as many rows as key values). One range (the whole table)
    when the span is too narrow for two, or one reader is asked for."""
    span = high - low + 1
    parts = min(readers * RANGES_PER_READER, span // max(chunk_rows, 1)) if readers > 1 else 1
    if parts < 2:
        return (KeyRange(low=None, high=None),)
    cuts = [low + span * i // parts for i in range(1, parts)]
    edges: list[int | None] = [None, *cuts, None]
    return tuple(KeyRange(low=a, high=b) for a, b in zip(edges, edges[1:]))


class RangeProgress(Model):
    """How far one range of a snapshot read on several connections is: its chunks read, the key of its last row
    (in the raw records' encoding, ``core.records.encode_value``), whether it is read to its end."""

    range: KeyRange
    chunks: int = 0
    rows: int = 0
    last_key: list[Any] | None = None
    done: bool = False


def ranges_left(ranges: Sequence[RangeProgress]) -> list[int]:
    """The indexes of the ranges not read to their end, in key order."""
    return [i for i, r in enumerate(ranges) if not r.done]
