"""Which tables a run captures: the configuration's entries, named tables and patterns, resolved against the
tables the server has now. Pure: the caller lists the server's tables and keeps the last resolution."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from airflow_cdc_provider.core.config import ConfigError, HiveConfig, TableConfig, TablePattern, name_clashes
from airflow_cdc_provider.core.errors import CdcError, InvalidIdentifier
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.model import Model


class StoredCatalogError(CdcError, ValueError):
    """A stored catalog (``SourceDir.catalog``) that is not a ``StoredCatalog``."""


@dataclass(frozen=True)
class Resolution:
    tables: tuple[TableConfig, ...]  # what this run captures, sorted by source
    missing: tuple[TableName, ...]  # named entries not found at the source, in the configuration's order
    named: frozenset[TableName]  # the tables named explicitly: their problems are fatal, a pattern's are warnings
    gone: tuple[tuple[TableName, str], ...]  # (source, hive table) the previous resolution had, not found now
    database: str = "ods"  # the Hive database of the tables' targets
    # (source, why) for tables a pattern matched whose Hive name cannot be made, or is another table's too: left
    # out, not fatal
    unusable: tuple[tuple[TableName, str], ...] = ()

    def hive_tables(self) -> dict[TableName, str]:
        """Each captured source's Hive table, ``database.table``."""
        return {t.source: f"{self.database}.{t.target}" for t in self.tables}


_NOTHING: Mapping[TableName, str] = MappingProxyType({})
_DEFAULT_DATABASE = str(HiveConfig.model_fields["database"].default)


def resolve(entries: Iterable[TableConfig | TablePattern], found: Iterable[TableName],
            previous: Mapping[TableName, str] = _NOTHING, hive: HiveConfig | None = None) -> Resolution:
    """The tables to capture now.

    ``found`` is every base table the capture user can see. A named entry selects its table when found (else it
    is missing); a pattern selects every found table it matches. A table named explicitly takes its own entry's
    options even when a pattern matches it too; among patterns the first that matches wins. ``previous`` maps
    each source of the last resolution to its Hive table; those not found now are ``gone``. Tables that would
    share a Hive table are left out but one (``_collisions``), and so are those whose changelog, snapshots or
    history table would be another's Hive table (``_beside_collisions``).
    """
    database = hive.database if hive is not None else _DEFAULT_DATABASE
    entries = tuple(entries)
    present = set(found)
    chosen: dict[TableName, tuple[TableConfig, TableConfig | TablePattern]] = {}
    missing = []
    for entry in entries:
        if isinstance(entry, TableConfig):
            if entry.source in present:
                chosen[entry.source] = (entry, entry)
            else:
                missing.append(entry.source)
    patterns = [e for e in entries if isinstance(e, TablePattern)]
    unusable = []
    by_schema: dict[str, set[str]] = {}  # each schema's table names, lower case: what a working table stands beside
    for found_name in present:
        by_schema.setdefault(found_name.schema, set()).add(found_name.table.lower())
    for name in sorted(present - set(chosen)):
        pattern = next((p for p in patterns if p.matches(name)), None)
        tool = online_schema_change_table(name, by_schema.get(name.schema, set())) if pattern is not None else None
        if tool is not None:
            unusable.append((name, f"{name} is {tool}: a pattern leaves it out (its rows are the table's, and it goes "
                                   "when the tool is done). Name it in an entry of its own to capture it."))
            continue
        if pattern is not None:
            try:
                chosen[name] = (pattern.table_config(name), pattern)
            except ConfigError as exc:  # one oddly named table must not stop the others
                unusable.append((name, str(exc)))
    unusable += _collisions(chosen, previous, database)
    unusable += _beside_collisions(chosen, previous, database, hive)
    named = frozenset(e.source for e in entries if isinstance(e, TableConfig))
    gone = tuple(sorted((source, hive_table) for source, hive_table in previous.items() if source not in present))
    return Resolution(tables=tuple(chosen[name][0] for name in sorted(chosen)), missing=tuple(missing),
                      named=named, gone=gone, database=database, unusable=tuple(sorted(unusable)))


# The working tables of online schema change tools, beside the table they change (its name in the group ``base``):
# pt-online-schema-change's _t_new and _t_old, gh-ost's _t_gho, _t_ghc and _t_del (_t_<time>_del with
# --timestamp-old-table), Spirit's _t_new, _t_old and _t_chkpnt, Facebook's OSC's __osc_new_t, __osc_old_t and
# __osc_chg_t, LHM's lhmn_t and lhma_<time>_t. pt-osc adds underscores in front while the name is taken.
_TOOL_TABLES = (
    (re.compile(r"_+(?P<base>.+)_(?:new|old)"), "a working table of pt-online-schema-change or Spirit"),
    (re.compile(r"_(?P<base>.+)_(?:gho|ghc|del)"), "a working table of gh-ost"),
    (re.compile(r"_(?P<base>.+)_\d{14}_del"), "a working table of gh-ost"),
    (re.compile(r"_(?P<base>.+)_chkpnt"), "a working table of Spirit"),
    (re.compile(r"__osc_(?:new|old|chg)_(?P<base>.+)"), "a working table of Facebook's OnlineSchemaChange"),
    (re.compile(r"lhm[na]_(?:\d+_)?(?P<base>.+)"), "a working table of LHM"),
)


def online_schema_change_table(name: TableName, beside: Collection[str]) -> str | None:
    """What ``name`` is when it is the working table (shadow, old or changelog table) of an online schema change
    tool beside the table it changes, whose name (lower case) ``beside`` holds: the tables of ``name``'s schema;
    None otherwise. A pattern that matched it would capture a copy of that table's rows that lives only while the
    tool runs."""
    here = beside
    for pattern, tool in _TOOL_TABLES:
        found = pattern.fullmatch(name.table)
        if found is not None and found.group("base").lower() in here:
            return f"{tool} on {name.schema}.{found.group('base')}"
    return None


def _collisions(chosen: dict[TableName, tuple[TableConfig, TableConfig | TablePattern]],
                previous: Mapping[TableName, str], database: str) -> list[tuple[TableName, str]]:
    """Two sources into one Hive table would overwrite each other's rows: one keeps the Hive table, the others
    are taken out of ``chosen`` and returned as (source, why). Unless all are shards (``shards:``), each naming its
    server or none naming one.

    Hive names ignore case, so ``crm.Orders`` and ``crm.orders`` collide, and so do ``a_b.c`` and ``a.b_c`` under
    ``{schema}_{table}``. The table the configuration names keeps the Hive table (two named ones are a
    configuration error); else the one the last run copied into it, so that a table appearing beside it does not
    stop a copy that has been going on; else none does, since no choice would be better than another.
    """
    by_target: dict[str, list[TableName]] = {}
    for name in sorted(chosen):
        by_target.setdefault(chosen[name][0].target, []).append(name)
    left_out: list[tuple[TableName, str]] = []
    for target, sources in by_target.items():
        if len(sources) < 2:
            continue
        hive_table = f"{database}.{target}"
        shardings = [chosen[s][0].settings.shards for s in sources]
        if all(shardings) and len({sharding.server is None for sharding in shardings if sharding}) == 1:
            continue  # shards of one Hive table (``core.shards``), as their entries say

        named = [s for s in sources if isinstance(chosen[s][1], TableConfig)]
        if len(named) > 1:
            raise ConfigError(
                f"The tables {named[0]} and {named[1]}, both named in the configuration, would both be copied into "
                f"the Hive table {hive_table} (Hive names ignore case): set a different `target:` for one of them.")
        held = [s for s in sources if previous.get(s) == hive_table]
        keeper = named[0] if named else held[0] if len(held) == 1 else None
        for source in sources:
            if source == keeper:
                continue
            others = ", ".join(f"{o} ({_origin(chosen[o][1])})" for o in sources if o != source)
            kept = (f"{keeper} keeps it ({'named in the configuration' if named else 'the last run copied it there'})"
                    if keeper is not None else "each of them is left out")
            left_out.append((source, (
                f"The tables {source} ({_origin(chosen[source][1])}) and {others} would "
                f"{'both' if len(sources) == 2 else 'all'} be copied into the Hive table {hive_table} (Hive names "
                f"ignore case): {kept}. To capture {source}, give it a Hive name of its own: an entry "
                f"`- source: {source}` with `target: a_name`, or a pattern `target:` template such as "
                "'{schema}__{table}'; or exclude it from the pattern.")))
    for source, _ in left_out:
        del chosen[source]
    return left_out


def _beside_collisions(chosen: dict[TableName, tuple[TableConfig, TableConfig | TablePattern]],
                       previous: Mapping[TableName, str], database: str,
                       hive: HiveConfig | None) -> list[tuple[TableName, str]]:
    """A table whose changelog, snapshots or history table (``config.beside_tables``, by its settings or the
    defaults of ``hive``) would be another table's Hive table: one of the two goes on, the other is taken out of
    ``chosen`` and returned with why (as in ``_collisions``): the named one goes on; else the one the last run
    copied into that Hive table, or else the one the last run copied into its own; else neither. A table one of
    whose tables beside has a name too long for Hive is left out. Between named tables, each is a configuration
    error (which ``CdcConfig.from_dict`` finds before)."""
    def named(table: TableConfig) -> bool:
        return isinstance(chosen[table.source][1], TableConfig)

    def held(table: TableConfig) -> bool:
        return previous.get(table.source) == f"{database}.{table.target}"

    left_out: dict[TableName, str] = {}
    for table, other, why in name_clashes([entry for entry, _ in chosen.values()], hive, database):
        if other is None or (named(table) and named(other)):
            if named(table):
                raise ConfigError(why)
            left_out.setdefault(table.source, f"{why} Until then it is left out.")
            continue
        keeper = next((t for t in (table, other) if named(t)), None) or next(
            (t for t in (other, table) if held(t)), None)
        if keeper is None:
            goes_on = "so is the other"
        else:
            kept_by = "named in the configuration" if named(keeper) else "the last run copied it"
            goes_on = f"{keeper.source} goes on ({kept_by})"
        for loser in (table, other):
            if loser is not keeper:
                left_out.setdefault(loser.source, f"{why} Until then {loser.source} is left out; {goes_on}.")
    for source in left_out:
        del chosen[source]
    return list(left_out.items())


def _origin(entry: TableConfig | TablePattern) -> str:
    return "named" if isinstance(entry, TableConfig) else f"matched by {entry}"


class StoredCatalog(Model):
    """What is kept of a resolution for the next one (``core.workdir.SourceDir.catalog``): each captured source
    (schema.table) and its Hive table."""

    tables: dict[str, str]

    @classmethod
    def of(cls, resolution: Resolution) -> StoredCatalog:
        return cls(tables={str(source): hive_table for source, hive_table in sorted(resolution.hive_tables().items())})

    @classmethod
    def parse(cls, text: str) -> StoredCatalog:
        """The stored catalog ``text``, or a StoredCatalogError that says to delete the file."""
        try:
            catalog = cls.model_validate_json(text)
        except ValueError:
            catalog = None
        if catalog is None or not all(catalog.tables.values()):
            raise StoredCatalogError(f"The stored table catalog {text!r} is not a mapping "
                                     "{'tables': {'schema.table': 'database.table'}}: delete the file; the next run "
                                     "writes it anew (and reports no gone tables once).")
        return catalog

    def previous(self) -> dict[TableName, str]:
        """The ``previous`` of ``resolve``."""
        try:
            return {TableName.parse(source): hive_table for source, hive_table in self.tables.items()}
        except InvalidIdentifier as exc:
            raise StoredCatalogError(f"The stored table catalog holds a source that is not a table name: {exc} "
                                     "Delete the file; the next run writes it anew.") from None
