"""The key of a captured table: what makes replaying a change idempotent and lets the merge match rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from airflow_cdc_provider.core.errors import NoUsableKey
from airflow_cdc_provider.core.identifiers import TableName

DECLARED = "declared"  # the index name of a key the configuration names (``key:``)


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

    @property
    def is_declared(self) -> bool:
        return self.index_name == DECLARED


def declared_key(table: TableName, declared: Sequence[str], nullable: Mapping[str, bool]) -> TableKey:
    """The key a table entry names (``key:``), checked against the table's columns (``nullable``: each column and
    whether it allows NULL). Whether its values are unique is the snapshot's to find, which reads them."""
    missing = [c for c in declared if c not in nullable]
    if missing:
        raise NoUsableKey(f"The `key:` of {table} names {', '.join(missing)}, which {table} does not have: its columns "
                          f"are {', '.join(nullable)}. Name columns of the table (as the server spells them).")
    allows_null = [c for c in declared if nullable[c]]
    if allows_null:
        raise NoUsableKey(f"The `key:` of {table} names {', '.join(allows_null)}, which allow NULL: a key column "
                          "must be NOT NULL (rows are read in key order, in chunks after the last key read, and a "
                          "comparison with NULL would leave rows out). Name NOT NULL columns, or make these NOT NULL.")
    return TableKey(table, DECLARED, tuple(declared))


def choose_key(table: TableName, index_columns: Iterable[IndexColumn], nullable: Mapping[str, bool],
               declared: Sequence[str] | None = None) -> TableKey:
    """The key the configuration declares (``declared_key``), else the primary key, else the unique key on NOT
    NULL columns with the fewest columns (then by name).

    A unique key with a nullable column admits many rows with NULL there, so it cannot identify a row: matched
    null-safely, as keys are (a zero date in a key column lands as NULL: docs/types.md, Keys), they would be one.
    """
    if declared:
        return declared_key(table, declared, nullable)
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
        "Replaying changes needs a key: add a primary key (or make a unique key's columns NOT NULL), or name "
        "NOT NULL columns whose values identify a row in the table's entry (`key: [col, …]`)."
    )
