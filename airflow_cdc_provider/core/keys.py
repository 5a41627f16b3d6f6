"""The key of a captured table: what makes replaying a change idempotent and lets the merge match rows.

A table with no usable key has its whole row as its identity (``WHOLE_ROW``): its rows are a multiset, each
distinct row counted as many times as the source holds it. Only a diff (``core.diff``) can capture such a table:
an UPDATE in the binlog of one of two equal rows cannot say which of them it changed, and replaying changes by
their values would change both."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from airflow_cdc_provider.core.errors import NoUsableKey
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.modes import Capture

DECLARED = "declared"  # the index name of a key the configuration names (``key:``)
WHOLE_ROW = "whole row"  # the index name of a table with no usable key: no key columns, the row is its identity


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

    @property
    def is_whole_row(self) -> bool:
        return self.index_name == WHOLE_ROW


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
    NULL columns with the fewest columns (then by name), else the whole row (``WHOLE_ROW``).

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
    return TableKey(table, WHOLE_ROW, ())


def whole_row_table(table: str, capture: str | None, changelog: bool, history: bool) -> None:
    """Refuse what a table with no key (its whole row its identity) cannot have: ``capture: binlog`` asked for by
    its entry, a changelog or a history, which follow a row by its key from one version to the next."""
    lacks = f"The table {table} has no primary key and no unique key on NOT NULL columns"
    way_on = "give it a key (a primary key, a unique key on NOT NULL columns, or `key:` in its entry naming NOT NULL " \
             "columns whose values identify a row)"
    if capture == Capture.BINLOG:
        raise NoUsableKey(f"{lacks}, and its entry asks for `capture: binlog`: in the binlog, a change to one of two "
                          "equal rows cannot be told from a change to the other. Remove `capture: binlog` (a table "
                          f"with no key is captured by a diff, docs/sources.md), or {way_on}.")
    for wanted, setting in ((changelog, "changelog:"), (history, "history:")):
        if wanted:
            raise NoUsableKey(f"{lacks}, and it is given a `{setting}`, which follows each row by its key from one "
                              f"version to the next. Set `{setting} false` in its entry, or {way_on}.")
