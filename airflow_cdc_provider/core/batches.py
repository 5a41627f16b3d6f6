"""How many rows a read of the source (a snapshot's chunk, a re-read) holds at once: bounded by bytes, not rows.

A table of small rows is read thousands of rows a batch; a table whose rows hold megabytes of TEXT or BLOB a few
rows a batch, or one: a read holds about its buffer whatever the rows' size, plus at most one row (a row larger
than the buffer cannot be held in less than itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_cdc_provider.core.types import ColumnType, unbounded

MAX_BATCH_ROWS = 10_000  # rows per batch however small: a batch is one Parquet row group of a snapshot file
DEFAULT_READ_BUFFER = 64 * 1024 * 1024
# MySQL's limit on a row's size, BLOB and TEXT columns apart (they are stored off the row): no row's other columns
# together hold more.
MAX_ROW_BYTES = 65_535
_CHARS = {"char", "varchar"}  # up to 4 bytes a character (utf8mb4)
_SMALL_VALUE = 16  # a number, a date, a time: its bytes as read


@dataclass(frozen=True)
class RowSize:
    """What a row of a table weighs as read: ``fixed`` bytes for the columns whose width the definition bounds
    (counted at that width), plus the measured length of the values of the ``measured`` columns."""

    fixed: int
    measured: tuple[int, ...] = ()

    @classmethod
    def of(cls, columns: Sequence[tuple[str, str]]) -> RowSize:
        """The row size of a table of ``columns`` (name, COLUMN_TYPE)."""
        fixed, measured = 0, []
        for i, (_, column_type) in enumerate(columns):
            t = ColumnType.parse(column_type)
            if unbounded(column_type):  # the row limit does not bound them: measured in each row
                measured.append(i)
            elif t.base in _CHARS:
                fixed += 4 * (t.numbers() or [1])[0]
            elif t.base in ("binary", "varbinary"):
                fixed += (t.numbers() or [1])[0]
            elif t.base in ("tinytext", "tinyblob"):
                fixed += 255
            elif t.base in ("enum", "set"):
                members = [4 * len(m) + 1 for m in t.members()] or [0]
                fixed += sum(members) if t.base == "set" else max(members)
            else:
                fixed += _SMALL_VALUE
        return cls(min(fixed, MAX_ROW_BYTES), tuple(measured))

    def bytes_of(self, row: Sequence[Any]) -> int:
        size = self.fixed
        for i in self.measured:
            value = row[i]
            if value is not None:
                size += len(value)
        return size


Fetch = Callable[[int], Sequence[Sequence[Any]]]  # up to n more rows of a result; none at its end


def next_batch(fetch: Fetch, size: RowSize, budget: int = DEFAULT_READ_BUFFER,
               max_rows: int = MAX_BATCH_ROWS) -> list[Sequence[Any]]:
    """The next rows ``fetch`` gives, at most ``max_rows``, holding at most ``budget`` bytes plus one row; [] at
    the end of the result.

    A table whose rows the definition bounds is fetched in one call (as many rows as fit at their widest); a
    table with TEXT, BLOB or JSON columns a row at a time, each row measured, the batch closed at the row that
    takes it to the budget. (PyMySQL's server-side cursor reads a row at a time either way: a fetch of one row
    costs no more per row.) Nothing is kept between calls: the caller drops a batch before it asks for the next,
    or holds two.
    """
    if not size.measured:
        return list(fetch(max(1, min(max_rows, budget // max(1, size.fixed)))))
    batch: list[Sequence[Any]] = []
    held = 0
    while held < budget and len(batch) < max_rows:
        fetched = fetch(1)
        if not fetched:
            break
        batch.append(fetched[0])
        held += size.bytes_of(fetched[0])
    return batch
