"""Schema changes met in the binlog between two watermarks, and what a run may do about each.

Row events carry their own columns (the table map, with ``binlog_row_metadata=FULL``), so each event is decoded
with the columns in force when it was written. When they differ from the columns before, the table's
definition changed in the range. Two policies decide what happens:

- ``strict`` (the default): a column added (nullable, or with a constant default) is taken on: the Hive table
  gains it, rows from before the change get the value the server gave them (the default). Anything else, a
  dropped or renamed column or a type that lands differently in Hive, stops the run before anything is written,
  with the DDL and its binlog position.
- ``evolve``: as Apache Paimon's MySQL sync does, what can be kept is kept. A dropped column stays in Hive and
  holds NULL in rows changed afterwards; a renamed column is a new column holding the renamed one's values
  (the DDL names the pair), the old one kept as if dropped. A type change that lands as the same Hive type
  (``VARCHAR(10)`` → ``VARCHAR(50)``, ``INT`` → ``MEDIUMINT``) passes.

Under both policies, a change no merge onto the version can follow makes the run load the table anew
(``reload_reason``): a column whose Hive type must change (``INT`` → ``BIGINT``, a ``DECIMAL`` widened, a column
dropped and added again with another type; Hive cannot change a column's type in place, and the version's files
hold the old type), and any change to the key (rows could no longer be matched). The run reads the table whole
and commits it as the next version with the source's columns (``stages.heal``). A widening keeps every value, so
``strict`` follows it too; the policies differ only where a column is dropped or renamed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import hive_column_problem
from airflow_cdc_provider.core.types import ColumnType, arrow_type, hive_type

POLICIES = ("strict", "evolve")


class SchemaChangeRefused(CdcError):
    """A schema change the table's policy does not take on; nothing of the run was written."""


class UnknownDefault(CdcError):
    """An added column whose value in the rows that existed before cannot be known."""


def landing(column_type: str) -> tuple[Any, ...]:
    """What decides how a column's values land: its Hive type and what its value rule depends on.

    Two types with the same landing are the same to Hive (``varchar(10)`` and ``varchar(50)``).
    """
    t = ColumnType.parse(column_type)
    detail: Any = None
    if t.base == "set":
        detail = tuple(t.members())  # the members' order orders a SET's text
    elif t.base in ("binary", "bit"):
        detail = tuple(t.numbers())  # padding, width
    return hive_type(column_type), detail


_AS_LOGGED = {"inet4": "binary(4)", "inet6": "binary(16)", "uuid": "binary(16)", "json": "longtext"}


def logged_as(known: str, logged: str) -> bool:
    """Whether a column defined as ``known`` shows in the binlog as ``logged`` (``column_type_of``).

    MariaDB logs INET4, INET6 and UUID as fixed binary strings and JSON as LONGTEXT, so the binlog alone
    cannot tell them; the definition can, as long as the two agree.
    """
    base = ColumnType.parse(known).base
    return landing(known) == landing(logged) or landing(_AS_LOGGED.get(base, known)) == landing(logged)


@dataclass(frozen=True)
class SchemaChange:
    """The table's columns before and after a point in the binlog, and the DDL found there."""

    table: str
    at: str  # where the new columns were first seen: "binlog.000003, position 1234"
    ddl: str | None  # the statement that changed the table, as logged, with its position
    before: tuple[tuple[str, str], ...]
    after: tuple[tuple[str, str], ...]
    renames: tuple[tuple[str, str], ...] = ()  # (old, new) as the DDL statements in between name them

    @property
    def renamed(self) -> list[tuple[str, str]]:
        """(old, new) pairs of a column renamed: named so by the DDL, the old name gone, the new one new."""
        old_names = {name.lower(): name for name, _ in self.before}
        new_names = {name.lower(): name for name, _ in self.after}
        origin = {name: name for name in old_names}  # a column's name now → its name before the change
        for old, new in self.renames:
            if old.lower() in origin:
                origin[new.lower()] = origin.pop(old.lower())
        return [(old_names[first], new_names[now]) for now, first in origin.items()
                if now != first and now in new_names and now not in old_names and first not in new_names]

    @property
    def added(self) -> list[str]:
        old = {name.lower() for name, _ in self.before} | {new.lower() for _, new in self.renamed}
        return [name for name, _ in self.after if name.lower() not in old]

    @property
    def dropped(self) -> list[str]:
        new = {name.lower() for name, _ in self.after} | {old.lower() for old, _ in self.renamed}
        return [name for name, _ in self.before if name.lower() not in new]

    def renamed_retyped(self) -> list[tuple[str, str]]:
        """Renamed columns whose type lands differently too: their values cannot be carried over."""
        old = {name.lower(): ctype for name, ctype in self.before}
        new = {name.lower(): ctype for name, ctype in self.after}
        return [(a, b) for a, b in self.renamed if landing(old[a.lower()]) != landing(new[b.lower()])]

    @property
    def retyped(self) -> list[tuple[str, str, str]]:
        old = {name.lower(): ctype for name, ctype in self.before}
        return [(name, old[name.lower()], ctype) for name, ctype in self.after
                if name.lower() in old and landing(old[name.lower()]) != landing(ctype)]

    def describe(self) -> str:
        parts = [f"added {', '.join(self.added)}" if self.added else "",
                 ", ".join(f"renamed {old} to {new}" for old, new in self.renamed),
                 f"dropped {', '.join(self.dropped)}" if self.dropped else "",
                 ", ".join(f"{name} changed from {old} to {new}" for name, old, new in self.retyped)]
        return "; ".join(p for p in parts if p) or "no column change"

    def headline(self) -> str:
        """The change in one sentence: the table, the DDL with its position, where it was seen, the columns."""
        ddl = f" by {self.ddl}" if self.ddl else ""
        return f"The table {self.table} changed{ddl} (first seen at {self.at}): {self.describe()}."


def refusal(change: SchemaChange, policy: str, key: Sequence[str]) -> str | None:
    """Why ``policy`` does not take ``change`` on, or None when it does."""
    if policy not in POLICIES:
        raise ValueError(f"The schema change policy {policy!r} is not one of {POLICIES}.")
    keys = {k.lower() for k in key}
    touched = [name for name in change.dropped if name.lower() in keys]
    touched += [name for name, _, _ in change.retyped if name.lower() in keys]
    touched += [old for old, _ in change.renamed if old.lower() in keys]
    unnamable = [f"{name!r} {problem}" for name in [*change.added, *(new for _, new in change.renamed)]
                 if (problem := hive_column_problem(name))]
    if unnamable:
        return (f"{change.headline()} It is not taken on: the column {'; '.join(unnamable)}. Nothing was written; the "
                "Hive table is as it was. Rename the column at the source (then trigger a run with "
                "fresh_snapshot=true), or leave the table out of the configuration.")
    if touched:
        return None  # a new table, loaded anew whatever the policy (``reload_reason``)
    if (change.dropped or change.renamed) and policy == "strict":
        reason = "the policy `schema_changes: strict` takes on added columns only"
    else:
        return None  # what is retyped is loaded anew (``reload_reason``)
    fix = ("Trigger a run with fresh_snapshot=true to reload the table with its new columns, or set "
           "`schema_changes: evolve` for the table to keep dropped and renamed columns in Hive")
    return f"{change.headline()} It is not taken on: {reason}. Nothing was written; the Hive table is as it was. {fix}."


def reload_reason(changes: Sequence[SchemaChange], key: Sequence[str]) -> str | None:
    """Why the table must be loaded anew rather than merged onto its version, or None when a merge can follow
    ``changes`` (each a change met in the range, in order, from the version's columns to the source's now).

    A merge cannot follow a change to the key (a key column dropped, renamed or retyped: rows could no longer be
    matched), nor a column whose Hive type changes: Hive cannot change a column's type in place, and the
    version's files hold the old type. Each change counts, and so does the range's net change, which shows a
    column dropped and added again with another type as one retyped."""
    if not changes:
        return None
    net = SchemaChange(table=changes[0].table, at=changes[0].at, ddl=None, before=changes[0].before,
                       after=changes[-1].after, renames=tuple(r for c in changes for r in c.renames))
    for change in (*changes, net):
        phrase = _reload_phrase(change, key)
        if phrase is not None:
            return f"{change.headline()} {phrase}"
    return None


def retyped_columns(before: Sequence[tuple[str, str]], after: Sequence[tuple[str, str]], key_before: Sequence[str],
                    key_after: Sequence[str]) -> str | None:
    """Why a table whose columns were ``before`` (the version's) and are ``after`` (the source's now) must be loaded
    anew, its key compared too (as ``reload_reason``); None when a merge can follow the change."""
    if [k.lower() for k in key_before] != [k.lower() for k in key_after]:
        return (f"Its key is ({', '.join(key_after) or 'none'}) at the source now, and was "
                f"({', '.join(key_before) or 'none'}) in the version: rows cannot be matched, it is a new table")
    change = SchemaChange(table="", at="", ddl=None, before=tuple(before), after=tuple(after))
    phrase = _reload_phrase(change, key_after)
    return f"Since the version, {change.describe()}. {phrase}" if phrase else None


def _reload_phrase(change: SchemaChange, key: Sequence[str]) -> str | None:
    keys = {k.lower() for k in key}
    touched = [name for name in change.dropped if name.lower() in keys]
    touched += [f"{name} ({old} → {new})" for name, old, new in change.retyped if name.lower() in keys]
    touched += [f"{old} (renamed {new})" for old, new in change.renamed if old.lower() in keys]
    if touched:
        return f"It changes the key column(s) {', '.join(touched)}: rows cannot be matched, it is a new table"
    retyped = [f"{name} ({old} → {new})" for name, old, new in change.retyped]
    retyped += [f"{old} renamed {new}" for old, new in change.renamed_retyped()]
    if retyped:
        return (f"The column(s) {', '.join(retyped)} land as another Hive type, which Hive cannot change in "
                "place")
    return None


def check_changes(changes: Sequence[SchemaChange], policy: str, key: Sequence[str]) -> None:
    """Raise SchemaChangeRefused for the first change ``policy`` does not take on."""
    for change in changes:
        reason = refusal(change, policy, key)
        if reason:
            raise SchemaChangeRefused(reason)


# --- carrying added columns into rows that predate them -------------------------------------------------


@dataclass(frozen=True)
class Fill:
    """The value an added column has in the rows that existed before it was added.

    A renamed column has the values of the column it was renamed from (``sources``, its earlier names, newest
    first); a new column has the constant its definition gave the existing rows (``value``).
    """

    column: str
    sources: tuple[str, ...] = ()
    value: Any = None
    needs_value: bool = True  # False when every earlier layout holds one of the sources


def added_columns(start: Sequence[tuple[str, str]], changes: Sequence[SchemaChange]) -> list[Fill]:
    """What each column added over ``changes`` holds in rows that predate it (values still to be looked up)."""
    sources: dict[str, tuple[str, ...]] = {}
    names: dict[str, str] = {}
    for change in changes:
        for old, new in change.renamed:
            sources[new.lower()] = (old, *sources.pop(old.lower(), ()))
            names[new.lower()] = new
        for name in change.added:
            sources[name.lower()] = ()  # added again after a drop: the rows got the default, not their old value
            names[name.lower()] = name
    first = {name.lower() for name, _ in start}
    return [Fill(names[key], chain, needs_value=not any(s.lower() in first for s in chain))
            for key, chain in sources.items()]


def combined_columns(layouts: Sequence[Sequence[tuple[str, str]]]) -> tuple[tuple[str, str], ...]:
    """Every column of the layouts, by name: the first layout's order, then the others' new ones as met.

    Each column has the type of the last layout that holds it (the policies let through only type changes
    that land the same). The Hive table gains columns at its end, whatever their place in MySQL.
    """
    order: dict[str, tuple[str, str]] = {}
    for layout in layouts:
        for name, ctype in layout:
            order[name.lower()] = (name, ctype)
    seen: list[str] = []
    for layout in layouts:
        seen += [name.lower() for name, _ in layout if name.lower() not in seen]
    return tuple(order[key] for key in seen)


def layout_plans(layouts: Sequence[Sequence[tuple[str, str]]], fills: Sequence[Fill]
                 ) -> tuple[tuple[tuple[str, str], ...], list[list[tuple[int | None, Any]]]]:
    """The combined columns, and for each layout how its rows become rows of them.

    A plan has one ``(index, constant)`` per combined column: the value at ``index`` of the layout's row, or
    ``constant`` when index is None. A column a layout holds is taken from it, unless the column was dropped
    and added again later (the rows got the new default). A column a layout lacks is its fill: the earliest
    of its sources the layout holds (the newest), else the constant; or NULL for a dropped column that was not
    added again.
    """
    target = combined_columns(layouts)
    lowered = [[name.lower() for name, _ in layout] for layout in layouts]
    last_added = {}
    for i, names in enumerate(lowered):
        for name in names:
            if i == 0 or name not in lowered[i - 1]:
                last_added[name] = i
    by_column = {f.column.lower(): f for f in fills}
    plans = []
    for i, names in enumerate(lowered):
        plan: list[tuple[int | None, Any]] = []
        for name, _ in target:
            key = name.lower()
            fill = by_column.get(key)
            if key in names and last_added[key] <= i:
                plan.append((names.index(key), None))
            elif fill is not None:
                held = [s.lower() for s in fill.sources if s.lower() in names]
                plan.append((names.index(held[0]), None) if held else (None, fill.value))
            else:
                plan.append((None, None))
        plans.append(plan)
    return target, plans


# --- the value rows from before an ADD COLUMN got ------------------------------------------------------

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_QUOTED = re.compile(r"^'((?:[^'\\]|''|\\.)*)'$", re.S)


def added_column_default(column: str, column_type: str, default: str | None, nullable: bool,
                         mariadb: bool) -> Any:
    """The value the server gave existing rows for a column added with this definition.

    ``default`` is information_schema's COLUMN_DEFAULT: on MariaDB an SQL literal (``'abc'``, ``5``, ``NULL``)
    or an expression, on MySQL the bare value. Only constants are known; an expression (``current_timestamp()``,
    ``uuid()``) gave each row its own value, and UnknownDefault says so.
    """
    text = default
    if mariadb and text is not None:
        if text.upper() == "NULL":
            text = None
        elif (quoted := _QUOTED.match(text)) is not None:
            text = quoted[1].replace("''", "'").replace("\\\\", "\\")
        elif not _NUMBER.match(text):
            text = "\0expression"
    if text is None:
        if nullable:
            return None
        text = _implicit_default(column_type)
        if text is None:
            return None
    if text == "\0expression":
        raise UnknownDefault(
            f"The column {column} ({column_type}) was added with the default {default}, an expression: each row that "
            "existed got its own value, which the binlog does not hold. Trigger a run with fresh_snapshot=true.")
    return _typed(column, column_type, text)


def _implicit_default(column_type: str) -> str | None:
    """What MySQL gives a NOT NULL column without a default: 0, '', an ENUM's first member, the zero date (NULL)."""
    t = ColumnType.parse(column_type)
    if t.base in ("date", "datetime", "timestamp", "year"):
        return None  # the zero date, which lands as NULL
    if t.base == "enum":
        return (t.members() or [""])[0]
    arrow = arrow_type(column_type)
    number = pa.types.is_integer(arrow) or pa.types.is_floating(arrow) or pa.types.is_decimal(arrow)
    return "0" if number else ""


def _typed(column: str, column_type: str, text: str) -> Any:
    arrow = arrow_type(column_type)
    try:
        if pa.types.is_integer(arrow):
            return int(Decimal(text))
        if pa.types.is_decimal(arrow):
            return Decimal(text)
        if pa.types.is_floating(arrow):
            return float(text)
        if pa.types.is_string(arrow):
            return text
        if pa.types.is_date(arrow):
            return dt.date.fromisoformat(text)
        if pa.types.is_timestamp(arrow) and arrow.tz is None:
            return dt.datetime.fromisoformat(text)
    except (ValueError, InvalidOperation):
        pass
    raise UnknownDefault(
        f"The column {column} ({column_type}) was added with the default {text!r}, which this pipeline cannot turn "
        "into the value existing rows got. Trigger a run with fresh_snapshot=true.")
