"""The pipeline configuration (the YAML the example DAG reads), as small typed values with clear errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_cdc_provider.core.errors import CdcError, InvalidIdentifier
from airflow_cdc_provider.core.identifiers import TableName, validate_hive_name
from airflow_cdc_provider.core.schema import POLICIES


class ConfigError(CdcError, ValueError):
    pass


@dataclass(frozen=True)
class HiveConfig:
    database: str = "ods"
    warehouse_dir: str = "/tmp/cdc/warehouse"
    metastore_uri: str | None = None  # None: an embedded metastore at <warehouse_dir>/metastore_db


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


@dataclass(frozen=True)
class CdcConfig:
    tables: tuple[TableConfig, ...]
    mysql_conn_id: str = "mysql_cdc"
    spark_conn_id: str = "spark_default"
    work_dir: str = "/tmp/cdc/work"
    hive: HiveConfig = HiveConfig()
    keep_versions: int = 3  # versions of each Hive table kept on disk; a re-run needs its input version
    retries: int = 2  # of each task whose retry is safe (all but the plan)
    schema_changes: str = "strict"  # what a run does with a schema change in its range (core.schema)

    def policy(self, table: TableConfig) -> str:
        return table.schema_changes or self.schema_changes

    @classmethod
    def from_dict(cls, data: Any, origin: str = "the configuration") -> CdcConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{origin} must be a mapping with a `tables:` list, got {type(data).__name__}.")
        known = {"mysql_conn_id", "spark_conn_id", "work_dir", "hive", "tables", "keep_versions", "retries",
                 "schema_changes"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{origin} has unknown keys {unknown}; the known keys are {sorted(known)}.")
        hive_data = data.get("hive") or {}
        if not isinstance(hive_data, dict) or set(hive_data) - {"database", "warehouse_dir", "metastore_uri"}:
            raise ConfigError(f"`hive:` in {origin} must hold only database, warehouse_dir and metastore_uri: {hive_data!r}.")
        hive = HiveConfig(**hive_data)
        hive = HiveConfig(validate_hive_name(hive.database, "Hive database name"), hive.warehouse_dir, hive.metastore_uri)
        tables_data = data.get("tables")
        if not isinstance(tables_data, list) or not tables_data:
            raise ConfigError(f"{origin} needs a non-empty `tables:` list of entries like `- source: shop.orders`.")
        tables = []
        for entry in tables_data:
            if isinstance(entry, str):
                entry = {"source": entry}
            if not isinstance(entry, dict) or "source" not in entry or set(entry) - {"source", "target",
                                                                                     "schema_changes"}:
                raise ConfigError(f"The table entry {entry!r} in {origin} must be `source: schema.table` "
                                  "with an optional `target: hive_table` and `schema_changes: strict|evolve`.")
            source = TableName.parse(entry["source"])
            target = entry.get("target") or f"{source.schema}_{source.table}"
            try:
                target = validate_hive_name(target, "Hive table name")
            except InvalidIdentifier as exc:
                raise ConfigError(f"{exc} Set `target:` for {source} in {origin}.") from None
            tables.append(TableConfig(source, target, _policy(entry.get("schema_changes"), f"{source} in {origin}")))
        sources = [t.source for t in tables]
        duplicates = sorted({str(s) for s in sources if sources.count(s) > 1})
        if duplicates:
            raise ConfigError(f"{origin} lists {', '.join(duplicates)} more than once: list each table once.")
        rest = {k: data[k] for k in ("mysql_conn_id", "spark_conn_id", "work_dir") if data.get(k) is not None}
        for name, least in (("keep_versions", 2), ("retries", 0)):
            value = data.get(name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < least:
                    raise ConfigError(f"`{name}:` in {origin} must be a whole number >= {least}, got {value!r}.")
                rest[name] = value
        policy = _policy(data.get("schema_changes"), origin)
        if policy:
            rest["schema_changes"] = policy
        return cls(tables=tuple(tables), hive=hive, **rest)


def _policy(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value not in POLICIES:
        raise ConfigError(f"`schema_changes:` of {where} must be one of {', '.join(POLICIES)}, got {value!r}. "
                          "strict takes on added columns only; evolve keeps dropped and renamed columns too.")
    return value
