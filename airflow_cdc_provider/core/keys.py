"""The key of a captured table: what makes replaying a change idempotent and lets the merge match rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_cdc_provider.core.errors import NoUsableKey
from airflow_cdc_provider.core.identifiers import TableName


@dataclass(frozen=True)
class IndexColumn:
    """One row of information_schema.STATISTICS."""

    index_name: str
    seq_in_index: int
    column_name: str
    non_unique: bool


@dataclass(frozen=True)
class TableKey:
    table: TableName
    index_name: str
    columns: tuple[str, ...]

    @property
    def is_primary(self) -> bool:
        return self.index_name == "PRIMARY"


def choose_key(table: TableName, index_columns: Iterable[IndexColumn], nullable: Mapping[str, bool]) -> TableKey:
    """The primary key, else the unique key on NOT NULL columns with the fewest columns (then by name).

    A unique key with a nullable column admits many rows with NULL there, so it cannot identify a row: matched
    null-safely, as keys are (a zero date in a key column lands as NULL: docs/types.md, Keys), they would be one.
    """
    indexes: dict[str, list[IndexColumn]] = {}
    for column in index_columns:
        indexes.setdefault(column.index_name, []).append(column)
    candidates = []
    for name, columns in indexes.items():
        columns.sort(key=lambda c: c.seq_in_index)
        if columns[0].non_unique:
            continue
        names = tuple(c.column_name for c in columns)
        if name == "PRIMARY":
            return TableKey(table, name, names)
        if not any(nullable.get(c, True) for c in names):
            candidates.append((len(names), name, names))
    if candidates:
        _, name, names = min(candidates)
        return TableKey(table, name, names)
    nullable_unique = sorted(n for n, cols in indexes.items() if not cols[0].non_unique)
    hint = (
        f" Its unique keys {', '.join(nullable_unique)} allow NULL, so they cannot identify a row."
        if nullable_unique
        else ""
    )
    raise NoUsableKey(
        f"The table {table} has no primary key and no unique key on NOT NULL columns.{hint} "
        "Replaying changes needs a key: add a primary key (or make a unique key's columns NOT NULL) "
        "before capturing this table."
    )
