"""The pipeline configuration (the YAML the example DAG reads), as small typed values with clear errors."""

from __future__ import annotations

import re
import string
import zoneinfo
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from airflow_cdc_provider.storage import StorageError, check_work_dir
from airflow_cdc_provider.core.errors import CdcError, InvalidIdentifier
from airflow_cdc_provider.core.identifiers import TableName, split_qualified, validate_hive_name, validate_identifier
from airflow_cdc_provider.core.schema import POLICIES


class ConfigError(CdcError, ValueError):
    pass


@dataclass(frozen=True)
class HiveConfig:
    database: str = "ods"
    warehouse_dir: str = "/tmp/cdc/warehouse"
    metastore_uri: str | None = None  # None: an embedded metastore at <warehouse_dir>/metastore_db
    # The zone the table's readers use (their spark.sql.session.timeZone): a DATETIME is written as the instant
    # its digits name in that zone, so those readers see the source's digits. TIMESTAMP is a true instant.
    time_zone: str = "UTC"


@dataclass(frozen=True)
class VerifyConfig:
    """When verify checks the tables against the source (``docs/verify.md``), and what a difference does."""

    every: int = 0  # verify a table every this many runs; 0: only in runs triggered with the `verify` parameter
    on_difference: str = "fail"  # fail: the verify task fails naming the tables; warn: it logs them and succeeds
    bucket_rows: int = 1000  # rows per bucket on average: a differing bucket's rows are what is looked into
    detail_buckets: int = 1000  # differing buckets looked into per table; beyond, they are counted only
    repair: bool = False  # the next run re-reads the keys found different (as the `repair` parameter asks)

    @classmethod
    def from_dict(cls, data: Any, origin: str) -> VerifyConfig:
        known = {"every", "on_difference", "bucket_rows", "detail_buckets", "repair"}
        if not isinstance(data, dict) or set(data) - known:
            raise ConfigError(f"`verify:` in {origin} must be a mapping of {', '.join(sorted(known))}, got {data!r}.")
        for name, least in (("every", 0), ("bucket_rows", 1), ("detail_buckets", 1)):
            value = data.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ConfigError(f"`verify: {name}:` in {origin} must be a whole number >= {least}, got {value!r}.")
        if data.get("on_difference", "fail") not in ("fail", "warn"):
            raise ConfigError(f"`verify: on_difference:` in {origin} must be `fail` (the verify task fails) or `warn` "
                              f"(it logs the difference and succeeds), got {data['on_difference']!r}.")
        if not isinstance(data.get("repair", False), bool):
            raise ConfigError(f"`verify: repair:` in {origin} must be true or false, got {data['repair']!r}.")
        return cls(**data)


@dataclass(frozen=True)
class TableConfig:
    source: TableName
    target: str  # the Hive table name, within HiveConfig.database
    schema_changes: str | None = None  # this table's policy, else the configuration's

    def hive_table(self, hive: HiveConfig) -> str:
        return f"{hive.database}.{self.target}"

    @property
    def group_id(self) -> str:
        """A task group id that is unique per source table and valid in Airflow (letters, digits, _ - .)."""
        return f"{self.source.schema}__{self.source.table}"


DEFAULT_TARGET = "{schema}_{table}"
_WILDCARDS = ("*", "?", "[")


@dataclass(frozen=True)
class TablePattern:
    """Selects every table of the server whose name matches, resolved at each run (``core.catalog.resolve``).

    Either ``schema`` and ``table``, fnmatch globs (a part written quoted is kept literal, its wildcards escaped
    as ``[*]``), or ``regex``, matched in full against ``schema.table``: the raw names joined by a dot, unquoted.
    Matching is case-sensitive, as the server's names are (its ``lower_case_table_names`` decides what they are).
    """

    schema: str | None = None
    table: str | None = None
    regex: re.Pattern[str] | None = None
    exclude: tuple[str, ...] = ()  # against ``schema.table`` as above: globs, or full-match regexes for a regex entry
    target: str = DEFAULT_TARGET  # the Hive table name, a template with {schema} and {table}
    schema_changes: str | None = None

    def __post_init__(self) -> None:
        if (self.regex is None) == (self.schema is None or self.table is None):
            raise ConfigError(f"A table pattern needs either schema and table globs or a regex, not both or neither: "
                              f"got schema={self.schema!r}, table={self.table!r}, regex={self.regex!r}.")

    def matches(self, name: TableName) -> bool:
        """Whether the pattern selects ``name`` and no ``exclude`` takes it out."""
        text = f"{name.schema}.{name.table}"
        if self.regex is not None:
            return self.regex.fullmatch(text) is not None and not any(re.fullmatch(x, text) for x in self.exclude)
        assert self.schema is not None and self.table is not None
        return (fnmatchcase(name.schema, self.schema) and fnmatchcase(name.table, self.table)
                and not any(fnmatchcase(text, x) for x in self.exclude))

    def table_config(self, name: TableName) -> TableConfig:
        """The concrete table this pattern makes of ``name``: its Hive table name from the ``target`` template."""
        target = self.target.format(schema=name.schema, table=name.table)
        try:
            target = validate_hive_name(target, "Hive table name")
        except InvalidIdentifier as exc:
            raise ConfigError(
                f"{exc} It is what the `target:` template {self.target!r} of the pattern {self} makes of {name}. "
                f"Set `target:` for {name} in an entry of its own (`- source: {name}` with `target: a_name`), "
                f"or change the pattern's `target:`, or exclude {name} from it."
            ) from None
        return TableConfig(name, target, self.schema_changes)

    def __str__(self) -> str:
        """The pattern as the user wrote it: ``shop.*``, ``*.orders`` or ``regex shop\\.o.*``."""
        if self.regex is not None:
            return f"regex {self.regex.pattern}"
        return f"{_show_glob(self.schema or '')}.{_show_glob(self.table or '')}"


def _escape_glob(name: str) -> str:
    """A glob matching exactly ``name``: a quoted part of a pattern is a name, whatever it holds."""
    return "".join(f"[{ch}]" if ch in _WILDCARDS else ch for ch in name)


def _glob_literal(glob: str) -> str | None:
    """The one name ``glob`` matches, or None when it has a wildcard (the inverse of ``_escape_glob``)."""
    out, i = [], 0
    while i < len(glob):
        if glob[i] == "[" and glob[i + 2 : i + 3] == "]" and glob[i + 1 : i + 2] in _WILDCARDS:
            out.append(glob[i + 1])
            i += 3
        elif glob[i] in _WILDCARDS:
            return None
        else:
            out.append(glob[i])
            i += 1
    return "".join(out)


def _show_glob(glob: str) -> str:
    # A name holding a dot or a backtick was written quoted; quoting it again keeps str() parseable.
    literal = _glob_literal(glob)
    if literal is not None and ("." in literal or "`" in literal):
        return "`" + literal.replace("`", "``") + "`"
    return glob


@dataclass(frozen=True)
class CdcConfig:
    tables: tuple[TableConfig | TablePattern, ...]  # as listed; core.catalog.resolve makes them concrete tables
    mysql_conn_id: str = "mysql_cdc"
    spark_conn_id: str = "spark_default"
    work_dir: str = "/tmp/cdc/work"  # a path or a URI (file://, s3://): see airflow_cdc_provider.storage
    work_conn_id: str | None = None  # the connection of an object-store work_dir (an `aws` one for s3://)
    hive: HiveConfig = HiveConfig()
    keep_versions: int = 3  # versions of each Hive table kept on disk; a re-run needs its input version
    retries: int = 2  # of each task whose retry is safe (all but the plan)
    schema_changes: str = "strict"  # what a run does with a schema change in its range (core.schema)
    snapshot_concurrency: int = 4  # new tables snapshotted at the same time: each holds a server connection
    merge_applications: int = 1  # Spark applications a run's merges share: each pays the JVM and session start
    # How long a run's table locks count as alive without a renewal: a killed run's lock is taken over after it.
    lock_lease_seconds: int = 600
    # A table whose binlog from its watermark was purged: fail it (nothing changes), or take a fresh snapshot.
    on_purged_binlog: str = "fail"
    # A table whose watermark was taken on another server that cannot be followed there (no GTIDs, or
    # transactions lost in a failover): fail it (nothing changes), or take a fresh snapshot.
    on_server_change: str = "fail"
    verify: VerifyConfig = VerifyConfig()
    progress_seconds: float = 10.0  # how often a snapshot and a binlog pass log how far they are

    def named_tables(self) -> tuple[TableConfig, ...]:
        """The entries that name one table, in their order."""
        return tuple(t for t in self.tables if isinstance(t, TableConfig))

    @property
    def has_patterns(self) -> bool:
        return any(isinstance(t, TablePattern) for t in self.tables)

    def policy(self, table: TableConfig) -> str:
        return table.schema_changes or self.schema_changes

    @classmethod
    def from_dict(cls, data: Any, origin: str = "the configuration") -> CdcConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{origin} must be a mapping with a `tables:` list, got {type(data).__name__}.")
        known = {"mysql_conn_id", "spark_conn_id", "work_dir", "work_conn_id", "hive", "tables", "keep_versions", "retries",
                 "schema_changes", "snapshot_concurrency", "merge_applications", "lock_lease_seconds",
                 "on_purged_binlog", "on_server_change", "verify", "progress_seconds"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{origin} has unknown keys {unknown}; the known keys are {sorted(known)}.")
        hive_data = data.get("hive") or {}
        if not isinstance(hive_data, dict) or set(hive_data) - {"database", "warehouse_dir", "metastore_uri", "time_zone"}:
            raise ConfigError(f"`hive:` in {origin} must hold only database, warehouse_dir, metastore_uri and time_zone: "
                              f"{hive_data!r}.")
        hive = HiveConfig(**hive_data)
        hive = replace(hive, database=validate_hive_name(hive.database, "Hive database name"),
                       time_zone=time_zone(hive.time_zone, f"`hive: time_zone:` in {origin}"))
        tables_data = data.get("tables")
        if not isinstance(tables_data, list) or not tables_data:
            raise ConfigError(f"{origin} needs a non-empty `tables:` list of entries like `- source: shop.orders` "
                              "or `- source: shop.*`.")
        tables = [_table_entry(entry, origin) for entry in tables_data]
        sources = [t.source for t in tables if isinstance(t, TableConfig)]
        duplicates = sorted({str(s) for s in sources if sources.count(s) > 1})
        if duplicates:
            raise ConfigError(f"{origin} lists {', '.join(duplicates)} more than once: list each table once.")
        # A later pattern with the same selection as an earlier one never wins a table: surely a mistake.
        selections = [_selection(t) for t in tables if isinstance(t, TablePattern)]
        repeated = [t for t in tables if isinstance(t, TablePattern) and selections.count(_selection(t)) > 1]
        if repeated:
            raise ConfigError(f"{origin} lists the pattern {repeated[0]} more than once with the same `exclude:`: "
                              "the later entry would never select a table. Keep one entry.")
        rest = {k: data[k] for k in ("mysql_conn_id", "spark_conn_id", "work_dir", "work_conn_id")
                if data.get(k) is not None}
        if "work_dir" in rest:
            try:
                check_work_dir(rest["work_dir"], f"`work_dir:` in {origin}")
            except StorageError as exc:
                raise ConfigError(str(exc)) from None
        for name, least in (("keep_versions", 2), ("retries", 0), ("snapshot_concurrency", 1),
                            ("merge_applications", 1), ("lock_lease_seconds", 10)):
            value = data.get(name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < least:
                    raise ConfigError(f"`{name}:` in {origin} must be a whole number >= {least}, got {value!r}.")
                rest[name] = value
        lease, retries = rest.get("lock_lease_seconds", cls.lock_lease_seconds), rest.get("retries", cls.retries)
        if retries and lease < 120:
            raise ConfigError(f"`lock_lease_seconds:` in {origin} is {lease}, shorter than a retry's wait: a task "
                              "retries after 60 s, and its run's locks must stay its own meanwhile. Give at least "
                              "120, or set `retries: 0`.")
        for name, fails in (("on_purged_binlog", "naming the missing file"),
                             ("on_server_change", "naming the old and the new server")):
            choice = data.get(name)
            if choice is not None:
                if choice not in ("fail", "snapshot"):
                    raise ConfigError(f"`{name}:` in {origin} must be `fail` (the default: the table fails, {fails}) "
                                      f"or `snapshot` (a fresh snapshot in the same run), got {choice!r}.")
                rest[name] = choice
        policy = _policy(data.get("schema_changes"), origin)
        if policy:
            rest["schema_changes"] = policy
        seconds = data.get("progress_seconds")
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
                raise ConfigError(f"`progress_seconds:` in {origin} must be a number of seconds >= 0 (how often a "
                                  f"snapshot and a binlog pass log how far they are), got {seconds!r}.")
            rest["progress_seconds"] = float(seconds)
        if data.get("verify") is not None:
            rest["verify"] = VerifyConfig.from_dict(data["verify"], origin)
        return cls(tables=tuple(tables), hive=hive, **rest)


def time_zone(value: Any, where: str) -> str:
    """An IANA zone name (``Asia/Shanghai``, ``UTC``) as Java and Python both know it."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a zone name such as UTC or Asia/Shanghai, got {value!r}.")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{where} is {value!r}, which is not a time zone name: use an IANA name such as UTC, "
                          "Asia/Shanghai or America/New_York (the zone your Hive readers set as "
                          "spark.sql.session.timeZone).") from None
    if value != "UTC" and "/" not in value:  # EST, CST…: abbreviations that Java reads otherwise, or not at all
        raise ConfigError(f"{where} is {value!r}: use a region name such as America/New_York rather than an "
                          "abbreviation or fixed offset, so that daylight-saving changes are followed.")
    return value


_ENTRY_KEYS = {"source", "regex", "target", "schema_changes", "exclude"}
_ENTRY_FORM = ("must be `source: schema.table` (a glob such as `shop.*` selects many tables) or `regex: 'shop\\.o.*'`, "
               "with an optional `target:`, `schema_changes: strict|evolve` and, on a pattern, `exclude:`")


def _table_entry(entry: Any, origin: str) -> TableConfig | TablePattern:
    if isinstance(entry, str):
        entry = {"source": entry}
    if isinstance(entry, dict) and "source" in entry and "regex" in entry:
        raise ConfigError(f"The table entry {entry!r} in {origin} has both `source:` and `regex:`: "
                          "keep one of them (a source may be a glob such as shop.*).")
    if not isinstance(entry, dict) or not ({"source", "regex"} & set(entry)) or set(entry) - _ENTRY_KEYS:
        raise ConfigError(f"The table entry {entry!r} in {origin} {_ENTRY_FORM}.")
    if "regex" in entry:
        pattern = TablePattern(regex=_compile(entry["regex"], f"the `regex:` of {entry!r} in {origin}"))
    else:
        selected = _parse_source(entry["source"], origin)
        if isinstance(selected, TableName):
            return _named_entry(selected, entry, origin)
        pattern = TablePattern(*selected)
    where = f"the pattern {pattern} in {origin}"
    return replace(pattern, exclude=_exclude(entry.get("exclude"), pattern.regex is not None, where),
                   target=_template(entry.get("target"), where),
                   schema_changes=_policy(entry.get("schema_changes"), where))


def _named_entry(source: TableName, entry: dict[str, Any], origin: str) -> TableConfig:
    if "exclude" in entry:
        raise ConfigError(f"The entry {source} in {origin} has `exclude:`, but it names one table: `exclude:` only "
                          "applies to a pattern (a source with *, ? or [, or a regex:). Remove it.")
    target = entry.get("target") or f"{source.schema}_{source.table}"
    try:
        target = validate_hive_name(target, "Hive table name")
    except InvalidIdentifier as exc:
        hint = " ({schema} and {table} apply only to a pattern's target.)" if "{" in str(target) else ""
        raise ConfigError(f"{exc} Set `target:` for {source} in {origin}.{hint}") from None
    return TableConfig(source, target, _policy(entry.get("schema_changes"), f"{source} in {origin}"))


def _parse_source(text: Any, origin: str) -> TableName | tuple[str, str]:
    """A named table, or the (schema, table) globs of a pattern: a part holding *, ? or [ unquoted is a glob."""
    if not isinstance(text, str):
        return TableName.parse(text)  # says what is wrong
    parts = split_qualified(text.strip())
    if not any(not quoted and any(w in name for w in _WILDCARDS) for name, quoted in parts):
        return TableName.parse(text)
    if len(parts) != 2 or not all(name for name, _ in parts):
        raise ConfigError(f"The table pattern {text!r} in {origin} is not of the form schema.table: write both "
                          "parts, for example shop.* or *.orders (quote a name holding a dot with backticks).")
    (schema, schema_quoted), (table, table_quoted) = parts
    for name, quoted, what in ((schema, schema_quoted, "schema name"), (table, table_quoted, "table name")):
        if quoted or not any(w in name for w in _WILDCARDS):
            validate_identifier(name, what)  # a literal part that MySQL refuses could never match
    return (_escape_glob(schema) if schema_quoted else schema), (_escape_glob(table) if table_quoted else table)


def _compile(value: Any, where: str) -> re.Pattern[str]:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where[0].upper()}{where[1:]} must be a non-empty regular expression, got {value!r}.")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ConfigError(f"The regular expression {value!r} ({where}) does not compile: {exc}. Fix it; it must "
                          r"match the whole schema.table, for example 'shop\.orders_\d+'.") from None


def _exclude(value: Any, regex: bool, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(x, str) and x for x in items):
        raise ConfigError(f"`exclude:` of {where} must be a non-empty string or list of strings "
                          f"(schema.table globs, or regexes for a regex entry), got {value!r}.")
    for item in items:
        if regex:
            _compile(item, f"an `exclude:` of {where}")
        elif "." not in item and _glob_literal(item) is not None:
            raise ConfigError(f"The `exclude:` {item!r} of {where} can never match: it is matched against "
                              f"schema.table. Write the schema too, for example *.{item}.")
    return tuple(items)


def _template(value: Any, where: str) -> str:
    """A pattern's `target:`: {table} is required, else every table it selects would share one Hive table."""
    if value is None:
        return DEFAULT_TARGET
    help_ = "write letters, digits and _ around {schema} and {table}, for example 'raw_{schema}_{table}'"
    if not isinstance(value, str):
        raise ConfigError(f"The `target:` of {where} must be a template string, got {value!r}: {help_}.")
    try:
        fields = [(f, conv, spec) for _, f, spec, conv in string.Formatter().parse(value) if f is not None]
    except ValueError as exc:
        raise ConfigError(f"The `target:` template {value!r} of {where} is not valid ({exc}): {help_}.") from None
    other = [f"{{{f}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}" for f, conv, spec in fields
             if f not in ("schema", "table") or conv or spec]
    if other:
        raise ConfigError(f"The `target:` template {value!r} of {where} uses {', '.join(other)}: only {{schema}} "
                          f"and {{table}} may appear; {help_}.")
    if "table" not in [f for f, _, _ in fields]:
        raise ConfigError(f"The `target:` template {value!r} of {where} lacks {{table}}: every table the pattern "
                          f"selects would map to the same Hive table; {help_}.")
    example = value.format(schema="s", table="t")
    try:
        validate_hive_name(example, "Hive table name")
    except InvalidIdentifier:
        raise ConfigError(f"The `target:` template {value!r} of {where} makes Hive names like {example!r}, which "
                          f"Hive refuses: {help_}.") from None
    return value


def _selection(pattern: TablePattern) -> tuple[Any, ...]:
    return (pattern.schema, pattern.table, pattern.regex and pattern.regex.pattern, pattern.exclude)


def _policy(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value not in POLICIES:
        raise ConfigError(f"`schema_changes:` of {where} must be one of {', '.join(POLICIES)}, got {value!r}. "
                          "strict takes on added columns only; evolve keeps dropped and renamed columns too.")
    return value
