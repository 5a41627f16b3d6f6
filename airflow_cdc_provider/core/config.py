"""The pipeline configuration (the YAML the example DAG reads): typed sections with clear errors.

    source:  the MySQL connection and the snapshot          work:    where run files, ledgers and locks live
    hive:    the target database, warehouse and metastore   spark:   the connection and the applications' settings
    run:     retries, locks and what a run does on faults   verify:  when the tables are checked against the source
    tables:  the tables, by name or pattern

Every key, its type, default and limits is listed in ``docs/configuration.md``, made from the fields below by
``core.config_reference``. The flat keys of earlier versions (``mysql_conn_id:``, ``work_dir:``…) are still
read, each into its section (``LEGACY_KEYS``).
"""

from __future__ import annotations

import difflib
import json
import re
import string
import typing
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, ValidationError, field_validator

from airflow_cdc_provider.core.changelog import ChangelogSettings, changelog_table
from airflow_cdc_provider.core.errors import CdcError, InvalidIdentifier
from airflow_cdc_provider.core.history import HistorySettings, history_table, snapshots_table
from airflow_cdc_provider.core.identifiers import (
    TableName,
    split_qualified,
    validate_hive_name,
    validate_identifier,
)
from airflow_cdc_provider.core.partitioning import BadPartitionSpec, PartitionSpec
from airflow_cdc_provider.core.schema import POLICIES
from airflow_cdc_provider.core.shards import Sharding
from airflow_cdc_provider.core.workdir import StorageError, check_work_dir, location_problem


class ConfigError(CdcError, ValueError):
    pass


def rendered_param(value: Any) -> Any:
    """A trigger parameter as a template renders it into a task (``| tojson``): its JSON text parsed, None for
    nothing given; a value already parsed, or text that is no JSON, as it is (the caller refuses a wrong form)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value.strip() not in ("", "None") else None
    except ValueError:
        return value


class _Invalid(ValueError):
    """A value a field's own rule refuses; its text goes on from "`key:` in <file> ", which the formatter adds."""


DOC = "docs/configuration.md"

Policy = Literal["strict", "evolve"]
POLICY_CHOICES: dict[str, JsonValue] = {
    "strict": "take on added columns only; a dropped or renamed column fails the table",
    "evolve": "keep dropped and renamed columns in Hive too (docs/types.md)"}
FailOrSnapshot = Literal["fail", "snapshot"]
FailSnapshotOrHeal = Literal["fail", "snapshot", "heal"]
HealOrStop = Literal["heal", "stop"]
Capture = Literal["binlog", "diff"]
CAPTURES = ("binlog", "diff")
CAPTURE_CHOICES: dict[str, JsonValue] = {
    "binlog": "read the changes from the binlog after each version's watermark (row-based binlog needed)",
    "diff": "compare the table with the last version's row digests each run, without the binlog "
            "([sources.md](sources.md#diff-mode))"}
assert tuple(POLICY_CHOICES) == POLICIES, "the policies core.schema knows"


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


# Spark settings -----------------------------------------------------------------------------------------------

# A Spark setting goes on spark-submit's command line, which every user of the worker can read (ps) and the task
# log shows: no credential may travel there.
_CREDENTIAL = re.compile(r"password|secret|token|credential|access\.?key|private\.?key|keytab", re.IGNORECASE)
_CREDENTIAL_VALUE = re.compile(r"(password|secret|token|access\.?key)[\w.]*\s*[=:]", re.IGNORECASE)
# Set by the merge and verify tasks from `hive:`: a second value would point the application elsewhere.
_OWN_SETTINGS = {"spark.sql.catalogImplementation": "`hive:` (always hive)",
                 "spark.sql.warehouse.dir": "`hive: warehouse_dir:`",
                 "spark.hadoop.hive.metastore.uris": "`hive: metastore_uri:`",
                 # The jobs read and write DATETIMEs as UTC instants; `hive: time_zone:` is the readers' zone.
                 "spark.sql.session.timeZone": "`hive: time_zone:` (the jobs work in UTC)",
                 **{f"spark.sql.parquet.{mode}": "MySQL's calendar (CORRECTED: no rebase)"
                    for mode in ("datetimeRebaseModeInRead", "datetimeRebaseModeInWrite", "int96RebaseModeInRead",
                                 "int96RebaseModeInWrite")}}
# Static SQL settings: fixed when the session starts, so a table cannot have its own value.
_STATIC_SQL = ("spark.sql.extensions", "spark.sql.hive.metastore.", "spark.sql.catalogImplementation",
               "spark.sql.warehouse.dir", "spark.sql.queryExecutionListeners", "spark.sql.streaming.ui.")


def spark_settings(value: Any, per_table: bool = False) -> dict[str, str]:
    """Spark settings as spark-submit's ``--conf`` takes them (strings), or an ``_Invalid`` that says why not.

    ``per_table``: a table entry's ``spark_conf:``, applied inside the merge's shared application while it handles
    that table, so only runtime SQL settings (``spark.sql.*``) can take effect there.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"must be a mapping of Spark settings, for example `spark.executor.memory: 4g`, got {value!r}.")
    settings = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.startswith("spark."):
            raise _Invalid(f"has the key {key!r}, which is not a Spark setting: Spark's settings start with `spark.` "
                           "(a Hadoop setting is written `spark.hadoop.<name>`). Fix the key.")
        if _CREDENTIAL.search(key) or (isinstance(item, str) and _CREDENTIAL_VALUE.search(item)):
            raise _Invalid(f"has the key {key!r}, which carries a credential: Spark settings go on spark-submit's "
                           "command line, which the task log shows and any user of the worker can read. Give "
                           "credentials through the Spark connection, an instance role, or the cluster's own "
                           "spark-defaults.conf; remove the key here.")
        if key in _OWN_SETTINGS:
            raise _Invalid(f"sets {key!r}, which the merge and verify tasks set from {_OWN_SETTINGS[key]}: set it "
                           "there instead.")
        if per_table and not key.startswith("spark.sql."):
            raise _Invalid(f"has the key {key!r}: a table's `spark_conf:` holds only runtime SQL settings "
                           "(`spark.sql.*`), which the merge applies while it handles that table in the application "
                           "it shares with the other tables. Set it for the whole application under "
                           "`spark: merge_conf:` instead.")
        if per_table and key.startswith(_STATIC_SQL):
            raise _Invalid(f"has the key {key!r}, a static SQL setting fixed when the application starts: set it "
                           "for the whole application under `spark: merge_conf:` instead.")
        if isinstance(item, bool):
            item = "true" if item else "false"
        elif isinstance(item, (int, float)):
            item = str(item)
        if not isinstance(item, str) or not item.strip():
            raise _Invalid(f"gives {key!r} the value {item!r}: give a string, number or true/false.")
        settings[key] = item
    return settings


# The sections -------------------------------------------------------------------------------------------------


class SourceConfig(_Section):
    """The MySQL server the tables are read from."""

    mysql_conn_id: str = Field("mysql_cdc", description="the Airflow connection (conn_type mysql) of the capture "
                               "user, who needs SELECT, REPLICATION SLAVE and REPLICATION CLIENT (SELECT alone "
                               "when every table is in diff mode)")
    snapshot_concurrency: int = Field(4, ge=1, description="new tables snapshotted at the same time; each holds a "
                                      "server connection")
    snapshot_chunk_rows: int = Field(50_000, ge=1, description="rows per keyset chunk of a snapshot: a killed "
                                     "snapshot resumes after its last finished chunk")
    snapshot_readers: int = Field(1, ge=1, le=64, description="connections a table's snapshot reads on at once, "
                                  "each but one in a process of its own, when its key begins with an integer "
                                  "column and spans two chunks or more: the table is read in key ranges, each in "
                                  "keyset chunks. Each reader holds a server connection and up to `read_buffer_mb`")
    binlog_decoders: int = Field(0, ge=0, le=16, description="processes that decode the binlog pass's row events "
                                 "beside it (the pass still reads the binlog once, on one connection, and writes the "
                                 "same raw files); 0: the pass decodes them itself")
    read_buffer_mb: int = Field(64, ge=1, description="megabytes of rows a snapshot (each of its tables read at "
                                "once) or a re-read holds before writing them; a row larger than this is held alone. "
                                "Fewer rows are held at a time when rows are large, never more bytes")
    progress_seconds: float = Field(10.0, ge=0, description="how often a snapshot and a binlog pass log how far "
                                    "they are (rows, rate, share done, time left); 0 logs every chunk")
    statement_timeout_seconds: int = Field(3600, ge=1, description="the longest a statement may run on the server "
                                           "before the server stops it and the task fails (a verify's sums, a "
                                           "binlog listing; snapshot chunks and re-reads are streamed and left out)")
    capture: Capture = Field("binlog", description="how each table's changes are found, unless its entry says",
                             json_schema_extra={"choices": CAPTURE_CHOICES, "per_table": "capture"})
    read_timeout_seconds: int = Field(600, ge=1, description="the longest the server may stay silent: on the binlog "
                                      "connection, and on a statement's beyond the statement time limit; past it "
                                      "the connection is closed and the task fails (its retries try again)")

    @property
    def read_buffer(self) -> int:
        """``read_buffer_mb`` in bytes, as the snapshot, the re-read and the diff read it (``core.batches``)."""
        return self.read_buffer_mb * 1024 * 1024


class WorkConfig(_Section):
    """Where each table's ledger, lock and run files live (``docs/runs.md``)."""

    # Required: no default is right. Under /tmp any user could make it first, own it and plant the files the
    # runs trust; and only the deployment knows what every worker and the Spark side see.
    dir: str = Field(description="raw, upsert and delete files, ledgers and locks: an absolute path every worker "
                     "sees, a file:// URI, or s3://bucket/prefix; a directory of the tasks' user alone (mode 700; "
                     "docs/security.md)", json_schema_extra={"example": "/var/lib/airflow-cdc/work"})
    conn_id: str | None = Field(None, description="the Airflow connection of an s3:// dir (conn_type aws); none "
                                "for a disk")

    @field_validator("dir")
    @classmethod
    def _dir(cls, value: str) -> str:
        try:
            return check_work_dir(value, "")
        except StorageError as exc:
            raise _Invalid(str(exc).lstrip()) from None


# A table's changelog (``core.changelog``) --------------------------------------------------------------------

CHANGELOG_TYPE = "`true`, `false` or mapping"
CHANGELOG_MEANING = ("a changelog table `<target>_changelog` beside the Hive table: each committed version's net "
                     "changes as rows (`_change_type`, `_change_ordinal`, `_commit_timestamp`, the binlog position), "
                     "partitioned by the day and the version; `true` with the defaults, or a mapping of its keys")
# The keys of a `changelog:` mapping, for the reference (``ChangelogSettings`` holds their values and defaults).
CHANGELOG_KEYS: dict[str, JsonValue] = {
    "mode": "`net` (default): one row per key a version changed, its pre-image looked up in the version before; "
            "`all`: every row event of the version's binlog range, in binlog order, an update's pre-image its "
            "before image",
    "snapshot": "what a first load writes: `insert` (default) every row as an insert, or `none`",
    "day_column": "the name of the day partition column (default `dt`)"}
assert tuple(CHANGELOG_KEYS) == tuple(ChangelogSettings.model_fields), "the keys core.changelog knows"
_CHANGELOG_EXAMPLE = "`changelog: true` for the defaults, or a mapping such as `changelog: {snapshot: none}`"


def changelog_settings(value: Any) -> ChangelogSettings | None:
    """A ``changelog:`` value read (``ChangelogSettings.of``), or an ``_Invalid`` that says in a sentence what is
    wrong with it and what to write instead."""
    if isinstance(value, ChangelogSettings):  # given so in code, not in a file
        return value
    settings: ChangelogSettings | None = _settings(ChangelogSettings, value, "a changelog", _CHANGELOG_EXAMPLE)
    return settings


def _settings(model: Any, value: Any, what: str, example: str) -> Any:
    """A mapping-valued key (``changelog:``, ``history:``) read by its model's ``of``, or an ``_Invalid`` that says
    in a sentence what is wrong with it and what to write instead."""
    try:
        return model.of(value)
    except ValidationError as exc:
        problems = "; it ".join(_settings_problem(error, model.model_fields, what) for error in exc.errors())
        raise _Invalid(f"{problems}. Write {example}.") from None
    except ValueError as exc:  # not a form the key takes at all
        raise _Invalid(f"{exc}. Write {example}.") from None


def _settings_problem(error: Any, fields: dict[str, Any], what: str) -> str:
    """One of pydantic's findings in a settings mapping, as a clause ("has …") naming the key, the value and what
    the key takes; ``what`` names the settings' kind ("a changelog")."""
    key = str(error["loc"][0]) if error["loc"] else ""
    cause = (error.get("ctx") or {}).get("error")
    if not key and isinstance(cause, ValueError):  # a rule over the mapping as a whole
        return str(cause).rstrip(".")
    if error["type"] == "extra_forbidden":
        return (f"has the key `{key}`{_did_you_mean([key], list(fields))}, which {what} does not have: its keys "
                f"are {', '.join(f'`{k}`' for k in fields)}")
    value = error["input"]
    given = f"has `{key}: {value if isinstance(value, str) else repr(value)}`"
    if isinstance(cause, ValueError):  # the day column's own rule
        return f"{given}: {str(cause).rstrip('.')}"
    if key not in fields:  # not a finding about one key: pydantic's own words
        return f"{given}: {error['msg']}"
    return f"{given}, which is not accepted: `{key}` takes {_accepted(fields[key])}"


def _accepted(field: Any) -> str:
    """What a key of a settings mapping takes, in words."""
    annotation = field.annotation
    if typing.get_origin(annotation) is Literal:
        values = [f"`{v}`" for v in typing.get_args(annotation)]
        return f"only {values[0]} so far" if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"
    if annotation is bool:
        return "`true` or `false`"
    if int in (annotation, *typing.get_args(annotation)):
        least = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), None)
        return "a whole number" + (f" >= {least}" if least is not None else "") + (
            ", or null" if type(None) in typing.get_args(annotation) else "")
    return "a Hive column name (letters, digits and _, in lower case)"


# A table's history (``core.history``) ------------------------------------------------------------------------

HISTORY_TYPE = "`false` or mapping"
HISTORY_MEANING = ("what the table was, in tables beside the Hive table: with `daily: true` `<target>_snapshots`, "
                   "the table as of each day's end in `hive: time_zone` (a partition per day, no row copied); with "
                   "`scd2: true` `<target>_history`, each row's successive values with the days they held "
                   "(`start_date`, `end_date`: `9999-12-31` while current, `is_current`), partitioned by `end_date`; "
                   "a mapping of its keys")
# The keys of a `history:` mapping, for the reference (``HistorySettings`` holds their values and defaults).
HISTORY_KEYS: dict[str, JsonValue] = {
    "daily": "`true`: keep the daily snapshots table",
    "keep_days": "days of daily snapshots kept (default null: every day)",
    "scd2": "`true`: keep the SCD2 history table",
    "granularity": "`day` (default): a value lasts whole days, and one held only within a day is not kept; `run`: "
                   "from commit to commit, with `start_time` and `end_time` too",
    "hard_deletes": "`invalidate` (default): a delete ends the row's value; `new_record`: it also starts a row "
                    "with `is_deleted` true",
    "day_column": "the name of the snapshots' day partition column (default `dt`)"}
assert tuple(HISTORY_KEYS) == tuple(HistorySettings.model_fields), "the keys core.history knows"
_HISTORY_EXAMPLE = "a mapping such as `history: {daily: true, scd2: true}`, or `history: false` for none"


def history_settings(value: Any) -> HistorySettings | None:
    """A ``history:`` value read (``HistorySettings.of``), or an ``_Invalid`` that says in a sentence what is wrong
    with it and what to write instead."""
    if isinstance(value, HistorySettings):  # given so in code, not in a file
        return value
    settings: HistorySettings | None = _settings(HistorySettings, value, "a history", _HISTORY_EXAMPLE)
    return settings


class HiveConfig(_Section):
    """Where the tables are written, and how many versions of each are kept."""

    database: str = Field("ods", description="the Hive database of the tables (lower-cased, as Hive keeps it)")
    warehouse_dir: str = Field(description="the warehouse the table versions are written under; the embedded "
                               "metastore lives in it. On this machine's disk, writable by the tasks' user alone",
                               json_schema_extra={"example": "/var/lib/airflow-cdc/warehouse"})
    metastore_uri: str | None = Field(None, description="thrift://host:port of a Hive metastore service; null: an "
                                      "embedded metastore at `warehouse_dir`/metastore_db, for one machine")
    time_zone: str = Field("UTC", description="the zone the tables' readers use (their spark.sql.session.timeZone):"
                           " a DATETIME is written so that it reads back with the source's digits there, and a "
                           "`partition_by:` of a DATETIME or TIMESTAMP dates its rows as they are seen there")
    keep_versions: int = Field(3, ge=2, description="versions of each Hive table kept on disk, and run directories "
                               "of each table kept in the work dir; a re-run needs its input version")
    changelog: ChangelogSettings | None = Field(None, description=CHANGELOG_MEANING + "; this is every table's, "
                                                "unless its entry sets its own (`false`: none)",
                                                json_schema_extra={"per_table": "changelog", "type": CHANGELOG_TYPE,
                                                                   "keys": CHANGELOG_KEYS})
    history: HistorySettings | None = Field(None, description=HISTORY_MEANING + "; this is every table's, unless "
                                            "its entry sets its own (`false`: none)",
                                            json_schema_extra={"per_table": "history", "type": HISTORY_TYPE,
                                                               "keys": HISTORY_KEYS})

    @field_validator("database")
    @classmethod
    def _database(cls, value: str) -> str:
        return validate_hive_name(value, "Hive database name")

    @field_validator("warehouse_dir")
    @classmethod
    def _warehouse_dir(cls, value: str) -> str:
        problem = location_problem(value, "warehouse directory")
        if problem:
            raise _Invalid(f"is {value!r}: {problem} Give an absolute path or a URI, for example "
                           "/var/lib/airflow-cdc/warehouse or hdfs://namenode/warehouse.")
        return value

    @field_validator("time_zone", mode="before")
    @classmethod
    def _time_zone(cls, value: Any) -> Any:
        problem = _time_zone_problem(value)
        if problem:
            raise _Invalid(problem)
        return value

    @field_validator("changelog", mode="before")
    @classmethod
    def _changelog(cls, value: Any) -> ChangelogSettings | None:
        return changelog_settings(value)

    @field_validator("history", mode="before")
    @classmethod
    def _history(cls, value: Any) -> HistorySettings | None:
        return history_settings(value)


class SparkConfig(_Section):
    """The Spark connection, and the settings of the merge and verify applications (``docs/deployment.md``)."""

    conn_id: str = Field("spark_default", description="the Airflow connection (conn_type spark): the master and "
                         "the deploy mode")
    conf: dict[str, str] = Field(default_factory=dict, description="Spark settings of the merge and the verify "
                                 "applications (spark-submit --conf): executor sizing, spark.archives, a "
                                 "Kubernetes image…; no credentials")
    merge_conf: dict[str, str] = Field(default_factory=dict, description="settings of the merge applications "
                                       "only, over `conf`",
                                       json_schema_extra={"per_table": "spark_conf (`spark.sql.*` only)"})
    verify_conf: dict[str, str] = Field(default_factory=dict, description="settings of the verify application "
                                        "only, over `conf`")
    merge_applications: int = Field(1, ge=1, description="Spark applications a run's merges are dealt into, one "
                                    "after the other; each pays the JVM and session start")
    class_archive: bool = Field(True, description="start a client-mode driver JVM from a class-data archive kept "
                                "on the worker, with the throughput collector unless the settings choose one: "
                                "seconds off every merge")

    @field_validator("conf", "merge_conf", "verify_conf", mode="before")
    @classmethod
    def _settings(cls, value: Any) -> dict[str, str]:
        return spark_settings(value)

    def merge_settings(self) -> dict[str, str]:
        """What the merge applications are submitted with."""
        return {**self.conf, **self.merge_conf}

    def verify_settings(self) -> dict[str, str]:
        """What the verify application is submitted with."""
        return {**self.conf, **self.verify_conf}


class RunConfig(_Section):
    """What a run does: retries, its locks, and the faults it can meet (``docs/runs.md``)."""

    retries: int = Field(2, ge=0, description="retries of each task whose retry is safe (all but the plan), a "
                         "minute apart")
    lock_lease_seconds: int = Field(600, ge=10, description="how long a run's table locks stay its own without a "
                                    "renewal by one of its tasks: a killed run's tables are free after it (at once to "
                                    "a run on the same host, docs/runs.md); at least 120 with retries")
    schema_changes: Policy = Field("strict", description="what a run does with a schema change in its range",
                                   json_schema_extra={"choices": POLICY_CHOICES, "per_table": "schema_changes"})
    on_broken_chain: HealOrStop = Field(
        "heal", description="a table whose rows changed in the run's range in a way its row events do not say (a "
        "TRUNCATE, a table dropped and created again, an online schema change's RENAME swap, a statement or event "
        "the capture does not understand: docs/capture.md)",
        json_schema_extra={"choices": {"heal": "the same run brings it level by a diff against its version, then "
                                               "goes on from the binlog (docs/runs.md)",
                                       "stop": "the table fails, naming the statement or event; nothing changes"}})
    on_purged_binlog: FailSnapshotOrHeal = Field(
        "heal", description="a table whose binlog from its watermark was purged",
        json_schema_extra={"choices": {"heal": "the same run brings it level by a diff against its version, then "
                                               "goes on from the binlog (docs/runs.md)",
                                       "fail": "the table fails, naming the missing file; nothing changes",
                                       "snapshot": "a fresh snapshot in the same run, with a warning"}})
    on_server_change: FailOrSnapshot = Field(
        "fail", description="a table whose watermark was taken on another server that cannot be followed on "
        "this one (no GTIDs, or transactions lost in a failover)",
        json_schema_extra={"choices": {"fail": "the table fails, naming the old and the new server",
                                       "snapshot": "a fresh snapshot in the same run, with a warning"}})
    replay_memory_mb: int = Field(512, ge=16, description="megabytes of keys the replay keeps in memory per "
                                  "table before it splits the table's changes into hash partitions on disk")
    allow_reread: bool = Field(False, description="whether a run may be triggered with the `reread` parameter: "
                               "its conditions are written by whoever triggers the run and read on the source, as "
                               "plain conditions on the table's own columns (docs/security.md); while false, such a "
                               "run is refused before it takes any lock")


class VerifyConfig(_Section):
    """When verify checks the tables against the source (``docs/verify.md``), and what a difference does."""

    every: int = Field(0, ge=0, description="verify each table whole every this many runs; 0: only in runs "
                       "triggered with the `verify` parameter")
    slices: int = Field(24, ge=0, description="the rolling verify: each run checks the next of this many slices of "
                        "each table's buckets, so that every table is checked whole every this many runs; 1: the "
                        "whole table every run; 0: no rolling verify")
    tables_per_run: int = Field(64, ge=0, description="the rolling verify checks at most this many tables a run, "
                                "those waiting longest since their last check (each costs about a second of Spark "
                                "planning); 0: every table every run")
    on_difference: Literal["fail", "warn"] = Field(
        "warn", description="what a difference found does (it is repaired all the same when `repair` is true)",
        json_schema_extra={"choices": {"fail": "the verify task fails, naming the tables",
                                       "warn": "it logs the difference and succeeds"}})
    bucket_rows: int = Field(1000, ge=1, description="rows per bucket on average: a differing bucket's rows are "
                             "what is looked into")
    detail_buckets: int = Field(1000, ge=1, description="differing buckets looked into per table; beyond, they "
                                "are counted only")
    repair: bool = Field(True, description="the next run reads again the keys found different (as the `repair` "
                         "parameter asks); false: they are only reported")


class TableEntry(_Section):
    """One entry of `tables:`: a table by name, or a pattern selecting many, resolved at each run
    (``docs/configuration.md``). Read by ``_table_entry``; this model names the keys that select the tables and
    name their Hive tables, ``TableSettings`` those that set them."""

    source: str | None = Field(None, description="`schema.table`, or globs (`*` `?` `[..]`) on schema and "
                               "table such as `shop.*` (a part quoted with backticks is a name)")
    regex: str | None = Field(None, description="instead of source: a regular expression matched in full against "
                              "schema.table")
    target: str | None = Field(None, description="the Hive table name; on a pattern a template with {schema} and "
                               "{table} (default {schema}_{table})")
    exclude: str | list[str] | None = Field(None, description="on a pattern: schema.table globs (regexes for a "
                                            "regex entry) taken out of what it selects")


def _parsed(parse: Any) -> Any:
    """A table setting's parser as its field's validator, for a value read from a configuration
    (``TableSettings.read``, whose context says where it was written, for the messages). A value given in code
    is already of the field's type."""
    return BeforeValidator(lambda value, info: parse(value, info.context["where"]) if info.context else value)


def _shards(value: Any, where: str) -> Sharding | None:
    """A table entry's `shards:`: `true`, or the name of the server its group reads (`shards: {server: eu}`)."""
    if value is None or value is False:
        return None
    if value is True:
        return Sharding()
    server = value.get("server") if isinstance(value, dict) and set(value) <= {"server"} else None
    if not isinstance(server, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", server):
        raise ConfigError(f"`shards:` of {where} must be `true`, or name the server its tables come from, such as "
                          f"`shards: {{server: eu_1}}` (letters, digits, _ . -; at most 64), got {value!r}: every "
                          "table the entry selects goes into its one `target:`, with the shard's server, schema and "
                          "table as columns (docs/sources.md).")
    return Sharding(server=server)


def _capture(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value not in CAPTURES:
        raise ConfigError(f"`capture:` of {where} must be one of {', '.join(CAPTURES)}, got {value!r}: binlog reads "
                          "the changes from the binlog, diff compares the table with its last version's row digests "
                          "(docs/sources.md).")
    return str(value)


def _key(value: Any, where: str) -> tuple[str, ...] | None:
    """A table entry's `key:`: a column name or a list of them, each once. Whether the table has them, NOT NULL,
    is the check's to find (``core.keys.declared_key``), and whether their values are unique the snapshot's."""
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if (not isinstance(names, list) or not names
            or not all(isinstance(n, str) and n.strip() and n == n.strip() for n in names)):
        raise ConfigError(f"`key:` of {where} must be a column name or a list of column names, such as "
                          f"`key: [order_id, line_no]`, got {value!r}.")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"`key:` of {where} names {', '.join(repeated)} more than once: name each column once.")
    return tuple(names)


def _table_spark_conf(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(spark_settings(value, per_table=True).items())
    except _Invalid as exc:
        raise ConfigError(f"`spark_conf:` of {where} {exc}") from None


def _partition_by(value: Any, where: str) -> PartitionSpec | None:
    """A table's `partition_by:` parsed when the configuration is read: its form is checked here, and whether it
    fits the table's columns by the check (``stages.check``), which knows them."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"`partition_by:` of {where} must be a text such as 'day(created_at)' or 'bucket(id, 64) "
                          f"AS b', got {value!r} ({type(value).__name__}). Quote it in the YAML.")
    try:
        return PartitionSpec.parse(value)
    except BadPartitionSpec as exc:
        raise ConfigError(f"`partition_by:` of {where}: {exc}") from None


def _table_changelog(value: Any, where: str) -> ChangelogSettings | Literal[False] | None:
    """A table entry's `changelog:`: `false` is none, whatever `hive: changelog:` says; null (or no key) leaves it
    to `hive: changelog:`. Whether it fits the table's columns is the check's to find (``stages.check``)."""
    if value is None:
        return None
    try:
        settings = changelog_settings(value)
    except _Invalid as exc:
        raise ConfigError(f"`changelog:` of {where} {exc}") from None
    return False if settings is None else settings


def _table_history(value: Any, where: str) -> HistorySettings | Literal[False] | None:
    """A table entry's `history:`: `false` (or a mapping that turns both off) is none, whatever `hive: history:`
    says; null (or no key) leaves it to `hive: history:`. Whether it fits the table's columns is the check's to
    find (``stages.check``)."""
    if value is None:
        return None
    try:
        settings = history_settings(value)
    except _Invalid as exc:
        raise ConfigError(f"`history:` of {where} {exc}") from None
    return False if settings is None else settings


def _policy(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value not in POLICIES:
        raise ConfigError(f"`schema_changes:` of {where} must be one of {', '.join(POLICIES)}, got {value!r}. "
                          "strict takes on added columns only; evolve keeps dropped and renamed columns too.")
    return str(value)


class TableSettings(BaseModel):
    """What a table entry sets for its table, or for each table its pattern selects: each key declared once here,
    with its type as read, its parser (the field's validator, whose messages name the entry) and its words for
    the reference. Carried whole from the entry to the table it makes (``TableConfig.settings``)."""

    # Not a ``core.model.Model``: a model with its own __init__ is validated through it, which drops the
    # validation's context (where the entry was written) before the parsers see it.
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_changes: Annotated[Policy | None, _parsed(_policy)] = Field(
        None, description="this table's policy, over `run: schema_changes`",
        json_schema_extra={"choices": POLICY_CHOICES})
    spark_conf: Annotated[tuple[tuple[str, str], ...], _parsed(_table_spark_conf)] = Field(
        (), description="runtime SQL settings (`spark.sql.*`) the merge applies while it handles this table, over "
        "`spark: merge_conf`", json_schema_extra={"type": "mapping of settings or null"})
    partition_by: Annotated[PartitionSpec | None, _parsed(_partition_by)] = Field(
        None, description="how the Hive table is partitioned: one transform of one column, such as `day(created_at)`, "
        "`truncate(id, 1000000)` or `bucket(id, 64) AS b` ([partitions.md](partitions.md)); null: not partitioned",
        json_schema_extra={"type": "string or null"})
    changelog: Annotated[ChangelogSettings | Literal[False] | None, _parsed(_table_changelog)] = Field(
        None, description=CHANGELOG_MEANING + ", over `hive: changelog` (`false`: none; null: as `hive: changelog` "
        "says)", json_schema_extra={"type": CHANGELOG_TYPE, "keys": CHANGELOG_KEYS})
    history: Annotated[HistorySettings | Literal[False] | None, _parsed(_table_history)] = Field(
        None, description=HISTORY_MEANING + ", over `hive: history` (`false`: none; null: as `hive: history` says)",
        json_schema_extra={"type": HISTORY_TYPE, "keys": HISTORY_KEYS})
    capture: Annotated[Capture | None, _parsed(_capture)] = Field(
        None, description="how this table's changes are found, over `source: capture`",
        json_schema_extra={"choices": CAPTURE_CHOICES})
    shards: Annotated[Sharding | None, _parsed(_shards)] = Field(
        None, description="`true`: every table the entry selects is a shard of its one `target:`, which gets the "
        "columns _source_schema and _source_table (its partitions); `{server: name}`: and _source_server, for "
        "shards on several servers, each group naming its own ([sources.md](sources.md#shards))",
        json_schema_extra={"type": "boolean or mapping of settings or null"})
    key: Annotated[tuple[str, ...] | None, _parsed(_key)] = Field(
        None, description="the columns that identify a row, for a table with no primary key and no unique key on "
        "NOT NULL columns (or instead of its own): NOT NULL columns, checked unique by each snapshot ([sources.md]"
        "(sources.md#declared-keys)); null: the table's own key", json_schema_extra={"type": "string or list of "
        "strings or null"})

    @classmethod
    def read(cls, entry: dict[str, Any], where: str) -> TableSettings:
        """The settings ``entry`` (a table entry of the configuration) gives; ``where`` names it in messages."""
        try:
            return cls.model_validate({name: entry[name] for name in cls.model_fields if name in entry},
                                      context={"where": where})
        except ValidationError as exc:
            # A parser's own message, which names the key, the entry, the value and what it must be.
            first = exc.errors()[0].get("ctx", {}).get("error")
            if isinstance(first, ConfigError):
                raise first from None
            raise


SECTIONS: dict[str, type[BaseModel]] = {"source": SourceConfig, "work": WorkConfig, "hive": HiveConfig,
                                        "spark": SparkConfig, "run": RunConfig, "verify": VerifyConfig}

# The flat keys of earlier versions, each read into its section: their files keep working.
LEGACY_KEYS: dict[str, tuple[str, str]] = {
    "mysql_conn_id": ("source", "mysql_conn_id"),
    "snapshot_concurrency": ("source", "snapshot_concurrency"),
    "progress_seconds": ("source", "progress_seconds"),
    "work_dir": ("work", "dir"),
    "work_conn_id": ("work", "conn_id"),
    "keep_versions": ("hive", "keep_versions"),
    "spark_conn_id": ("spark", "conn_id"),
    "merge_applications": ("spark", "merge_applications"),
    "retries": ("run", "retries"),
    "lock_lease_seconds": ("run", "lock_lease_seconds"),
    "schema_changes": ("run", "schema_changes"),
    "on_purged_binlog": ("run", "on_purged_binlog"),
    "on_server_change": ("run", "on_server_change"),
}


@dataclass(frozen=True)
class TableConfig:
    source: TableName
    target: str  # the Hive table name, within HiveConfig.database
    settings: TableSettings = TableSettings()  # what its entry sets (`schema_changes:`, `partition_by:`, …)

    def hive_table(self, hive: HiveConfig) -> str:
        return f"{hive.database}.{self.target}"

    def changelog_settings(self, default: ChangelogSettings | None) -> ChangelogSettings | None:
        """The table's changelog: its entry's own `changelog:` (`false` for none), else ``default`` (`hive:
        changelog:`)."""
        own = self.settings.changelog
        if own is None:
            return default
        return None if own is False else own

    def history_settings(self, default: HistorySettings | None) -> HistorySettings | None:
        """The table's history: its entry's own `history:` (`false` for none), else ``default`` (`hive:
        history:`)."""
        own = self.settings.history
        if own is None:
            return default
        return None if own is False else own

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
    settings: TableSettings = TableSettings()  # what its entry sets, for each table it selects

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
        return TableConfig(name, target, self.settings)

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


class CdcConfig(BaseModel):
    """The whole configuration of one source: read it with ``CdcConfig.from_dict(yaml.safe_load(...), path)``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, arbitrary_types_allowed=True)

    source: SourceConfig = SourceConfig()
    work: WorkConfig  # its `dir` has no default
    hive: HiveConfig  # its `warehouse_dir` has no default
    spark: SparkConfig = SparkConfig()
    run: RunConfig = RunConfig()
    verify: VerifyConfig = VerifyConfig()
    tables: tuple[TableConfig | TablePattern, ...]  # as listed; core.catalog.resolve makes them concrete tables

    def named_tables(self) -> tuple[TableConfig, ...]:
        """The entries that name one table, in their order."""
        return tuple(t for t in self.tables if isinstance(t, TableConfig))

    @property
    def has_patterns(self) -> bool:
        return any(isinstance(t, TablePattern) for t in self.tables)

    def policy(self, table: TableConfig) -> str:
        return table.settings.schema_changes or self.run.schema_changes

    def capture(self, table: TableConfig) -> str:
        """How ``table``'s changes are found: its entry's `capture:`, else `source: capture:`."""
        return table.settings.capture or self.source.capture

    @classmethod
    def from_dict(cls, data: Any, origin: str = "the configuration") -> CdcConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{origin} must be a mapping with a `tables:` list, got {type(data).__name__}.")
        known = [*SECTIONS, "tables", *LEGACY_KEYS]
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ConfigError(f"{origin} has unknown keys {unknown}{_did_you_mean(unknown, known)}; the known keys "
                              f"are the sections {', '.join([*SECTIONS, 'tables'])}, and the flat keys of earlier "
                              f"versions {', '.join(LEGACY_KEYS)} (see {DOC}).")
        # A key left empty (`verify:` with nothing under it) is its default, as it always was.
        sections: dict[str, Any] = {k: v for k, v in data.items() if k in SECTIONS and v is not None}
        labels: dict[tuple[str, str], str] = {}  # (section, key) → how the file wrote it, for the messages
        for key, (section, name) in LEGACY_KEYS.items():
            if data.get(key) is None:
                continue
            written = sections.get(section, {})
            if not isinstance(written, dict):
                continue  # the section's own message says it must be a mapping
            if name in written:
                raise ConfigError(f"{origin} sets `{key}:` and `{section}: {name}:` both: keep one, under "
                                  f"`{section}:`.")
            sections[section] = {**written, name: data[key]}
            labels[(section, name)] = f"`{key}:`"
        tables = _tables(data.get("tables"), origin)
        try:
            config = cls.model_validate({**sections, "tables": tables})
        except ValidationError as exc:
            raise _config_error(exc, origin, labels) from None
        run = config.run
        if run.retries and run.lock_lease_seconds < 120:
            where = labels.get(("run", "lock_lease_seconds"), "`run: lock_lease_seconds:`")
            raise ConfigError(f"{where} in {origin} is {run.lock_lease_seconds}, shorter than a retry's wait: a task "
                              "retries after 60 s, and its run's locks must stay its own meanwhile. Give at least "
                              "120, or set `retries: 0`.")
        # Between named tables, found now; a pattern's tables are known only at the check (``core.catalog``).
        clashes = name_clashes(config.named_tables(), config.hive, config.hive.database)
        if clashes:
            raise ConfigError("\n".join(f"{why.removesuffix('.')} (in {origin})." for _, _, why in clashes))
        return config


def beside_tables(table: TableConfig, hive: HiveConfig | None) -> list[tuple[str, str, str]]:
    """The tables the pipeline keeps beside ``table``'s Hive table, given the defaults of ``hive``: (what it is,
    its name, the key that asks for it), each named from the target (``<target>_changelog``, ``_snapshots``,
    ``_history``)."""
    target = table.target.lower()
    changelog = table.changelog_settings(hive.changelog if hive is not None else None)
    history = table.history_settings(hive.history if hive is not None else None)
    beside = [("changelog table", changelog_table(target), "changelog")] if changelog is not None else []
    if history is not None and history.daily:
        beside.append(("snapshots table", snapshots_table(target), "history"))
    if history is not None and history.scd2:
        beside.append(("history table", history_table(target), "history"))
    return beside


def name_clashes(tables: Iterable[TableConfig], hive: HiveConfig | None,
                 database: str) -> list[tuple[TableConfig, TableConfig | None, str]]:
    """The tables one of whose tables beside (``beside_tables``) cannot be made, each with the table whose Hive
    table has that name (None: the name is longer than Hive allows) and why, in a sentence. A changelog or a
    history written into another table's Hive table would replace its rows, or the other way round. Two tables
    beside can only share a name when their Hive tables do (their suffixes differ), which ``core.catalog`` and
    the reading of named entries refuse first."""
    tables = list(tables)
    by_target = {t.target.lower(): t for t in tables}
    clashes: list[tuple[TableConfig, TableConfig | None, str]] = []
    for table in tables:
        for what, name, key in beside_tables(table, hive):
            other = by_target.get(name)
            if other is not None:
                clashes.append((table, other, (
                    f"The {what} of {table.source} would be {database}.{name}, the Hive table {other.source} is "
                    f"copied into: give one of them another `target:`, or set `{key}: false` for {table.source}.")))
                continue
            try:
                validate_hive_name(name, f"{what} name")
            except InvalidIdentifier:
                clashes.append((table, None, (
                    f"The {what} of {table.source} would be named {name!r}, longer than the 128 characters a Hive "
                    f"name may have: give {table.source} a shorter `target:`, or set `{key}: false` for it.")))
    return clashes


def _tables(data: Any, origin: str) -> tuple[TableConfig | TablePattern, ...]:
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{origin} needs a non-empty `tables:` list of entries like `- source: shop.orders` "
                          "or `- source: shop.*`.")
    tables = [_table_entry(entry, origin) for entry in data]
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
    return tuple(tables)


# The messages -------------------------------------------------------------------------------------------------


def _config_error(exc: ValidationError, origin: str, labels: dict[tuple[str, str], str]) -> CdcError:
    """One sentence per problem pydantic found: which key, in which file, the value, and what it must be."""
    messages: list[str] = []
    unknown: dict[str, list[str]] = {}
    for error in exc.errors():
        loc = error["loc"]
        section = str(loc[0])
        model = SECTIONS.get(section)
        if model is None:  # `tables`, whose entries are read before: cannot happen, but say it plainly
            messages.append(f"`{section}:` in {origin}: {error['msg']}.")
            continue
        if error["type"] == "missing":
            keys = [str(loc[1])] if len(loc) > 1 else [k for k, f in model.model_fields.items() if f.is_required()]
            messages += [_missing(section, key, model, origin) for key in keys]
            continue
        if len(loc) == 1:
            messages.append(f"`{section}:` in {origin} must be a mapping of {', '.join(model.model_fields)}, "
                            f"got {error['input']!r} "
                            f"(see {DOC}).")
            continue
        key = str(loc[1])
        if error["type"] == "extra_forbidden":
            unknown.setdefault(section, []).append(key)
            continue
        label = labels.get((section, key), f"`{section}: {key}:`")
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, CdcError):  # a rule of its own, such as a Hive name's: its type is kept
            return type(cause)(f"{cause} ({label} in {origin})")
        if isinstance(cause, _Invalid):
            messages.append(f"{label} in {origin} {cause}")
            continue
        field = model.model_fields[key]
        messages.append(f"{label} in {origin} must be {expectation(field)}, got {error['input']!r} "
                        f"({field.description}).")
    for section, keys in unknown.items():
        known_keys = list(SECTIONS[section].model_fields)
        messages.append(f"`{section}:` in {origin} has unknown keys {sorted(keys)}"
                        f"{_did_you_mean(keys, known_keys)}; the keys of `{section}:` are "
                        f"{', '.join(sorted(known_keys))} (see {DOC}).")
    return ConfigError("\n".join(messages))


def _missing(section: str, key: str, model: type[BaseModel], origin: str) -> str:
    field = model.model_fields[key]
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return (f"`{section}: {key}:` is missing in {origin}: it has no default. Give {field.description}, for example "
            f"`{section}: {{{key}: {extra.get('example')}}}` (see {DOC}).")


def expectation(field: Any) -> str:
    """What a field's value must be, in words: "a whole number >= 2", "`fail` (…) or `snapshot` (…)"."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    choices: dict[str, str] = extra.get("choices") or {}
    if choices:
        named = [f"`{c}` ({meaning})" for c, meaning in choices.items()]
        return f"{', '.join(named[:-1])} or {named[-1]}"
    least = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), None)
    annotation = field.annotation
    text = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}.get(annotation)
    if annotation == str | None:
        text = "a string, or null"
    text = text or "a mapping of Spark settings to values"
    return f"{text} >= {least}" if least is not None else text


def _did_you_mean(wrong: list[str], known: list[str]) -> str:
    close = [m for w in wrong for m in difflib.get_close_matches(w, known, n=1)]
    return f" (did you mean {', '.join(f'`{c}`' for c in close)}?)" if close else ""


def _time_zone_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"must be a zone name such as UTC or Asia/Shanghai, got {value!r}."
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return (f"is {value!r}, which is not a time zone name: use an IANA name such as UTC, Asia/Shanghai or "
                "America/New_York (the zone your Hive readers set as spark.sql.session.timeZone).")
    if value != "UTC" and "/" not in value:  # EST, CST…: abbreviations that Java reads otherwise, or not at all
        return (f"is {value!r}: use a region name such as America/New_York rather than an abbreviation or fixed "
                "offset, so that daylight-saving changes are followed.")
    return None


def time_zone(value: Any, where: str) -> str:
    """An IANA zone name (``Asia/Shanghai``, ``UTC``) as Java and Python both know it."""
    problem = _time_zone_problem(value)
    if problem:
        raise ConfigError(f"{where} {problem}")
    return str(value)


_ENTRY_KEYS = set(TableEntry.model_fields) | set(TableSettings.model_fields)
_ENTRY_FORM = ("must be `source: schema.table` (a glob such as `shop.*` selects many tables) or `regex: 'shop\\.o.*'`, "
               f"with an optional `target:`, {', '.join(f'`{key}:`' for key in TableSettings.model_fields)} and, on "
               "a pattern, `exclude:`")


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
    settings = TableSettings.read(entry, where)
    return replace(pattern, exclude=_exclude(entry.get("exclude"), pattern.regex is not None, where),
                   target=_template(entry.get("target"), where, settings.shards is not None), settings=settings)


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
    return TableConfig(source, target, TableSettings.read(entry, f"{source} in {origin}"))


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


def _template(value: Any, where: str, shards: bool = False) -> str:
    """A pattern's `target:`: {table} is required, else every table it selects would share one Hive table, unless
    they are its shards (``shards``)."""
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
    if "table" not in [f for f, _, _ in fields] and not shards:
        raise ConfigError(f"The `target:` template {value!r} of {where} lacks {{table}}: every table the pattern "
                          f"selects would map to the same Hive table; {help_}; or, for its shards, `shards: true`.")
    example = value.format(schema="s", table="t")
    try:
        validate_hive_name(example, "Hive table name")
    except InvalidIdentifier:
        raise ConfigError(f"The `target:` template {value!r} of {where} makes Hive names like {example!r}, which "
                          f"Hive refuses: {help_}.") from None
    return value


def _selection(pattern: TablePattern) -> tuple[Any, ...]:
    return (pattern.schema, pattern.table, pattern.regex and pattern.regex.pattern, pattern.exclude)
