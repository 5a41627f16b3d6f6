"""Foreign keys with cascading actions: the child rows InnoDB changes without a row event, and the tables whose
copy from the binlog they would make drift.

An ``ON DELETE`` or ``ON UPDATE`` ``CASCADE``, ``SET NULL`` or ``SET DEFAULT`` is carried out inside the storage
engine: the binlog holds the parent's row event, and none for the child rows it deleted or changed. A table that
is the child of such a key (its own parent too, when the key refers to its own table) and is captured from the
binlog would keep the rows its source deleted and the parent keys its source changed.

Design: the check captures such a table by a diff (``capture: diff``) rather than derive its changes from the
parent's events. Deriving them exactly needs the child rows as they were at each cascade, in binlog order (which
rows referred to the parent row then, and what a ``SET NULL`` left of them after the other changes of the range),
and the binlog does not hold that state; a guess from the copy's version would be wrong whenever the range also
changed the child. A diff compares the table itself with its last version, so it is exact for such a table, and
it needs no one to act, as for a table with no key (``core.keys``). An entry that sets ``capture: binlog`` itself
asks for what cannot be exact: that table is refused (stopped, the others go on), with the ways out. The binlog
is exact again once the key is ``RESTRICT`` or ``NO ACTION`` and the application makes the child's changes itself.

Where the rules come from: ``information_schema.REFERENTIAL_CONSTRAINTS``. MariaDB shows its rows only to a user
with a privilege on the table beyond SELECT (REFERENCES, INDEX…), which the capture user does not hold; its
``KEY_COLUMN_USAGE`` still shows the keys. The rules of a key shown there alone are read from the table's
``SHOW CREATE TABLE`` (``shown_rules``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import TableName, backticked
from airflow_cdc_provider.core.modes import Capture

# The rules of information_schema.REFERENTIAL_CONSTRAINTS that make the server change the child's rows itself;
# RESTRICT and NO ACTION refuse the parent's change instead, and change nothing.
CASCADING_RULES = frozenset({"CASCADE", "SET NULL", "SET DEFAULT"})


class ForeignKeyColumn(NamedTuple):
    """One column of one foreign key: a row of ``information_schema.KEY_COLUMN_USAGE`` with its key's rules from
    ``REFERENTIAL_CONSTRAINTS`` (``with_rules``), in any order."""

    constraint_schema: str
    constraint_name: str
    child_schema: str
    child_table: str
    child_column: str
    position: int  # ORDINAL_POSITION: the column's place in the key, from 1
    parent_schema: str
    parent_table: str
    parent_column: str
    update_rule: str | None = None  # None: not shown to this user (MariaDB; see the module's docstring)
    delete_rule: str | None = None

    @property
    def child(self) -> TableName:
        return TableName(self.child_schema, self.child_table)


# A key's (ON UPDATE, ON DELETE) rules, by its child and its name.
Rules = Mapping[tuple[TableName, str], tuple[str, str]]


@dataclass(frozen=True)
class ForeignKey:
    """A foreign key, its columns in order: ``child`` (columns) REFERENCES ``parent`` (parent_columns)."""

    schema: str  # the constraint's schema (the child's)
    name: str
    child: TableName
    columns: tuple[str, ...]
    parent: TableName
    parent_columns: tuple[str, ...]
    on_update: str
    on_delete: str

    @property
    def cascades(self) -> tuple[str, ...]:
        """Its actions that change the child's rows without a row event, as SQL writes them: ``ON DELETE CASCADE``…"""
        return tuple(f"ON {event} {rule}" for event, rule in (("DELETE", self.on_delete), ("UPDATE", self.on_update))
                     if rule in CASCADING_RULES)

    def __str__(self) -> str:
        return (f"{backticked(self.name)} ({', '.join(self.columns)}) REFERENCES {self.parent} "
                f"({', '.join(self.parent_columns)}) {' '.join(self.cascades) or 'with no cascading action'}")


class CascadingForeignKey(CdcError):
    """A table whose entry sets `capture: binlog` that is the child of a foreign key with a cascading action."""

    def __init__(self, table: TableName, keys: tuple[ForeignKey, ...]) -> None:
        self.table, self.keys = table, keys
        super().__init__(_refusal(table, keys))


@dataclass(frozen=True)
class DiffForCascades:
    """A table the source's way would read from the binlog that is the child of a foreign key with a cascading
    action: captured by a diff instead, which is exact for it."""

    table: TableName
    keys: tuple[ForeignKey, ...]


def with_rules(rows: Iterable[ForeignKeyColumn], rules: Rules) -> list[ForeignKeyColumn]:
    """``rows``, each whose key ``rules`` has given its rules (``(ON UPDATE, ON DELETE)`` by child and name)."""
    given = []
    for row in rows:
        found = rules.get((row.child, row.constraint_name))
        given.append(row._replace(update_rule=found[0], delete_rule=found[1]) if found else row)
    return given


def hidden_rules(rows: Iterable[ForeignKeyColumn]) -> list[TableName]:
    """The children of the keys whose rules ``rows`` lack: the tables whose ``SHOW CREATE TABLE`` tells them."""
    return sorted({row.child for row in rows if row.update_rule is None or row.delete_rule is None})


# A quoted name, or a string (a default, a comment, a check): either may hold a backtick or `ON DELETE`.
_TOKEN = re.compile(r"'(?:[^'\\]|\\.|'')*'|`((?:[^`]|``)*)`", re.S)
_FOREIGN_KEY = re.compile(r"\s*CONSTRAINT \x00(\d+)\x00 FOREIGN KEY ")
_RULE = re.compile(r"\bON (DELETE|UPDATE) (CASCADE|SET NULL|SET DEFAULT|RESTRICT|NO ACTION)\b")


def shown_rules(table: TableName, create_table: str) -> dict[tuple[TableName, str], tuple[str, str]]:
    """Each foreign key's ``(ON UPDATE, ON DELETE)`` rules as ``SHOW CREATE TABLE`` of ``table`` writes them (its
    names quoted, ``sql_quote_show_create``), by child and name; a rule it does not write is RESTRICT, the
    default."""
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        # The clauses are read with every name and string taken out: those may hold anything.
        if match.group(1) is None:
            return "''"
        names.append(match.group(1).replace("``", "`"))
        return f"\x00{len(names) - 1}\x00"

    found = {}
    for line in _TOKEN.sub(placeholder, create_table).splitlines():
        key = _FOREIGN_KEY.match(line)
        if key:
            rules = dict(_RULE.findall(line))
            found[(table, names[int(key.group(1))])] = (rules.get("UPDATE", "RESTRICT"),
                                                        rules.get("DELETE", "RESTRICT"))
    return found


def foreign_keys(rows: Iterable[ForeignKeyColumn]) -> tuple[ForeignKey, ...]:
    """The foreign keys ``rows`` describe, each with its columns in key order; sorted by child, then name. A key
    whose rules are still unknown is left out: it was dropped between the statements that read it."""
    grouped: dict[tuple[str, str, TableName], list[ForeignKeyColumn]] = {}
    for row in rows:
        grouped.setdefault((row.constraint_schema, row.constraint_name, row.child), []).append(row)
    keys = []
    for (schema, name, child), columns in grouped.items():
        columns.sort(key=lambda column: column.position)
        first = columns[0]
        if first.update_rule is None or first.delete_rule is None:
            continue
        keys.append(ForeignKey(schema=schema, name=name, child=child,
                               columns=tuple(c.child_column for c in columns),
                               parent=TableName(first.parent_schema, first.parent_table),
                               parent_columns=tuple(c.parent_column for c in columns),
                               on_update=_rule(first.update_rule), on_delete=_rule(first.delete_rule)))
    return tuple(sorted(keys, key=lambda key: (key.child, key.name)))


def cascading_foreign_keys(rows: Iterable[ForeignKeyColumn], tables: Iterable[TableName]
                           ) -> dict[TableName, tuple[ForeignKey, ...]]:
    """Each of ``tables`` that is the child of a foreign key with a cascading action, with every such key (one
    that refers to the table itself too); a table with none is not in the answer."""
    wanted = set(tables)
    found: dict[TableName, list[ForeignKey]] = {}
    for key in foreign_keys(rows):
        if key.child in wanted and key.cascades:
            found.setdefault(key.child, []).append(key)
    return {table: tuple(keys) for table, keys in sorted(found.items())}


def cascade_captures(rows: Iterable[ForeignKeyColumn], captures: Mapping[TableName, str],
                     own_binlog: Collection[TableName] = ()) -> dict[TableName, DiffForCascades | CascadingForeignKey]:
    """What becomes of each table of ``captures`` (each table to its way in: ``binlog`` or ``diff``) that would be
    read from the binlog while the child of a cascading foreign key: captured by a diff instead
    (``DiffForCascades``), or refused (``CascadingForeignKey``) when it is in ``own_binlog``, the tables whose own
    entry sets `capture: binlog`. A table in diff mode is exact whatever its foreign keys do: not in the answer."""
    binlog = [table for table, capture in captures.items() if capture == Capture.BINLOG]
    chosen = set(own_binlog)
    return {table: CascadingForeignKey(table, keys) if table in chosen else DiffForCascades(table, keys)
            for table, keys in cascading_foreign_keys(rows, binlog).items()}


def _rule(rule: str) -> str:
    return " ".join(str(rule).upper().split())


def counted_keys(count: int) -> str:
    """"a foreign key", or "3 foreign keys": how the check's messages count them."""
    return "a foreign key" if count == 1 else f"{count} foreign keys"


def _refusal(table: TableName, keys: tuple[ForeignKey, ...]) -> str:
    """What, why and the ways out, for a person reading the check's log, the run's summary or the pre-flight."""
    parents = ", ".join(dict.fromkeys(str(key.parent) for key in keys))
    listed = "; ".join(str(key) for key in keys)
    which = counted_keys(len(keys))
    return (f"The table {table} is the child of {which} with a cascading action: {listed}. The server (InnoDB) "
            f"deletes or changes {table}'s rows for these actions itself, without a row event in the binlog (only the "
            f"change to {parents} is logged), so a copy read from the binlog cannot follow them: it would keep the "
            f"rows the source deleted and the old parent keys. Its entry sets `capture: binlog`: remove that "
            f"(`- source: {table}` without `capture:`; a named entry's options hold over a pattern's), and the check "
            "captures it by a diff, which is exact for it. "
            "Or change the foreign key to RESTRICT or NO ACTION (drop it and add it again with ON DELETE RESTRICT "
            "ON UPDATE RESTRICT) and have the application delete or change the child rows itself: those changes "
            "are logged.")
