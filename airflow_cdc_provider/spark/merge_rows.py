"""The rows of a merge, as Spark frames: the capture files as the Hive table's columns, the fills of columns added
in the range, the origin's rows as the new version's columns, the merge itself, the version's net changes, and
the partitions a merge of a partitioned table rewrites.

    new = origin LEFT ANTI JOIN deletes ON key <=> key
                 LEFT ANTI JOIN upserts ON key <=> key
          UNION ALL upserts
"""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.changelog import POSITION_COLUMNS
from airflow_cdc_provider.core.ledger import VersionInfo
from airflow_cdc_provider.core.merge import MergeSpec
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.partitioning import Partitioning, metastore_value
from airflow_cdc_provider.core.version_plan import VersionPlan
from airflow_cdc_provider.spark.changelog import last_changes, net_changes
from airflow_cdc_provider.spark.history import matching_keys, renamed_keys
from airflow_cdc_provider.spark.names import column
from airflow_cdc_provider.spark.partitioning import partition_value
from airflow_cdc_provider.spark.targets import partitions_frame


def hive_frame(spark: Any, paths: list[str], columns: list[tuple[str, str]], spec: MergeSpec,
               keep: tuple[str, ...] = ()) -> Any:
    """Parquet files of the capture stages, as the Hive columns: lower-case names (Hive's), Hive types; with the
    columns ``keep`` the files have (replay's positions), as they are.

    A DATETIME holds the UTC instant of its digits in the capture files; for readers in another zone it becomes
    the instant its digits name there (the session is in UTC)."""
    from pyspark.sql.functions import to_utc_timestamp

    frame = spark.read.parquet(*paths)
    shifted = set(spec.datetime_columns) if spec.datetime_zone != "UTC" else set()

    def hive_column(name: str, hive: str) -> Any:
        value = column(name).cast(hive)
        return (to_utc_timestamp(value, spec.datetime_zone) if name.lower() in shifted else value).alias(name.lower())

    have = set(frame.columns)
    return frame.select([hive_column(name, hive) for name, hive in columns] + [column(k) for k in keep if k in have])


def datetimes_in_gaps(spark: Any, spec: MergeSpec) -> int:
    """Upsert rows with a DATETIME whose digits do not exist in the readers' zone: a wall-clock time skipped by a
    daylight-saving change. Java's time rules move it forward by the gap; the count is reported, not hidden."""
    from functools import reduce

    from pyspark.sql.functions import from_utc_timestamp, to_utc_timestamp

    if spec.datetime_zone == "UTC" or not spec.datetime_columns:
        return 0
    raw = spark.read.parquet(*spec.upsert_files)
    names = {name.lower(): name for name in raw.columns}
    zone = spec.datetime_zone
    # There and back: a time that exists in the zone comes back with its own digits, a skipped one does not.
    moved = [from_utc_timestamp(to_utc_timestamp(value, zone), zone) != value
             for value in (column(names[c]).cast("timestamp") for c in spec.datetime_columns
                           if c in names)]
    return raw.where(reduce(lambda a, b: a | b, moved)).count() if moved else 0


def fills_of(spark: Any, spec: MergeSpec, plan: VersionPlan) -> tuple[Any, dict[str, list[str]]]:
    """The one-row frame of the plan's filled columns' constants (as ``__fill_<name>``), and each one's source
    columns. Without a fills file (a heal's added columns), the rows that predate them hold NULL there: the heal
    read again every row that holds a value in one (``core.diff.heal_digest``)."""
    sources = {added: list(of) for added, of in plan.filled}
    if not sources or not spec.fills_file:
        return None, sources
    types = dict(spec.hive_columns)
    frame = hive_frame(spark, [spec.fills_file], [(added, types[added.lower()]) for added, _ in spec.fill_sources],
                        spec)
    frame = frame.select([column(name).alias(f"__fill_{name}") for name in sources])
    return frame, sources


def upserts_of(spark: Any, spec: MergeSpec, columns: list[tuple[str, str]]) -> Any:
    """The upsert files' rows as ``columns``: a column the source no longer has (kept by ``evolve``) NULL."""
    from pyspark.sql.functions import lit

    upserts = hive_frame(spark, list(spec.upsert_files), spec.hive_columns, spec)
    have = set(upserts.columns)
    return upserts.select([column(name) if name in have else lit(None).cast(hive).alias(name)
                           for name, hive in columns])


def as_columns(old: Any, columns: list[tuple[str, str]], fills: tuple[Any, dict[str, list[str]]]) -> Any:
    """A version's rows as ``columns``: the columns added in the range get their fill (``fills_of``), as the rows
    predate them; a column the version lacks is NULL."""
    from pyspark.sql.functions import broadcast, lit

    fill_row, sources = fills
    held = set(old.columns)
    if fill_row is not None:
        old = old.crossJoin(broadcast(fill_row))

    def origin_value(name: str, hive: str) -> Any:
        if name in sources:  # added in the range: the rows here predate it
            source = next((s for s in sources[name] if s in held), None)
            value = column(source) if source else column(f"__fill_{name}") if fill_row is not None else lit(None)
        elif name in held:
            value = column(name)
        else:
            value = lit(None)
        return value.cast(hive).alias(name)

    return old.select([origin_value(name, hive) for name, hive in columns])


def merged(spark: Any, spec: MergeSpec, origin: Any, columns: list[tuple[str, str]]) -> Any:
    """origin ANTI JOIN deletes ANTI JOIN upserts UNION ALL upserts, as ``columns``, where ``origin`` holds the
    origin's rows as ``columns`` (``as_columns``; of a partitioned table, those of the partitions rewritten);
    just the upserts without an origin."""
    key = spec.hive_key
    upserts = upserts_of(spark, spec, columns)
    if origin is None:
        return upserts
    if spec.buckets and spec.replaced:  # read again from the source whole: the upserts hold what is there
        origin = origin.where(~bucket_column(spec).isin(list(spec.replaced)))
    if spec.delete_file is not None:  # a snapshot's input has none
        key_columns = [(name, hive) for name, hive in spec.hive_columns if name in key]
        origin = without_keys(origin, hive_frame(spark, [spec.delete_file], key_columns, spec), key)
    return without_keys(origin, upserts, key).unionByName(upserts)


def bucket_column(spec: MergeSpec) -> Any:
    """Verify's bucket of each row's key (``core.verify``), over the table's rows."""
    from airflow_cdc_provider.spark.verify_job import bucket_of, key_text

    key_types = [(name, ctype) for name, ctype in spec.source_columns if name in spec.key]
    return bucket_of(key_text(key_types, spec.key, True, spec.datetime_zone), spec.buckets)


def without_keys(rows: Any, keys: Any, key: list[str], how: str = "left_anti") -> Any:
    """The rows of ``rows`` whose key is none of ``keys``'s rows' keys (a left anti join), compared null-safely.

    A key part can be NULL in Hive: a zero date in a DATETIME, DATE or TIMESTAMP key column (docs/types.md).
    With ``=`` (or a join USING the names) NULL matches nothing, so a deleted or updated row with such a key
    would stay beside its new version. ``<=>`` (``eqNullSafe``) matches it; Spark still plans it as a hash or
    sort-merge join, on each part's value and its NULL flag. The other side's key columns are renamed first,
    to names holding a comma, which no column of a captured table can hold (``hive_column_problem``): the
    condition's names can then only mean one side each, whatever the table's own names are. ``how``
    ``left_semi`` keeps the rows whose key is among them instead."""
    return matching_keys(rows, renamed_keys(keys, key), key, how)


def rows_before(spark: Any, spec: MergeSpec, current: VersionInfo, location: str, touched: set[str] | None,
                columns: list[tuple[str, str]], fills: tuple[Any, dict[str, list[str]]],
                origin_version: int | None) -> Any:
    """The rows of the version the table is at (``current``, as its version file describes it, at ``location``)
    that the run may change, as ``columns``: all of them (``touched`` None: a load); for a merge, of a partitioned
    table those of the partitions it rewrites. None when there are none to read.

    Read from that version, not from the merge's origin (``origin_version``): a re-run merging onto its input
    version again finds the table at its own earlier result, and the change from there to the new version is none.
    Columns added in the range get their fill only in the origin itself, which predates them."""
    if current.partitioning is None:
        locations = [location]
    else:
        locations = [where for value, where in current.partitions if touched is None or value in touched]
    if not locations:
        return None
    if current.partitioning is None:
        rows = spark.read.parquet(location)
    else:
        rows = partitions_frame(spark, spec, current.partitioning, locations)
    return as_columns(rows, columns, fills if current.version == origin_version else (None, {}))


def version_net(spark: Any, spec: MergeSpec, before: Any, columns: list[tuple[str, str]],
                first_load: bool) -> tuple[Any, tuple[Any, ...]]:
    """The version's net changes (``spark.changelog.net_changes``) from the capture files and ``before``,
    persisted (the changelog and the history are both written from them), and the frames kept for them: the
    caller unpersists both once it wrote what it needed."""
    key = spec.hive_key
    frames = [(hive_frame(spark, [path], spec.hive_columns, spec, POSITION_COLUMNS), True)
              for path in spec.upsert_files]
    if spec.delete_file is not None:
        key_columns = [(name, hive) for name, hive in spec.hive_columns if name in key]
        frames.append((hive_frame(spark, [spec.delete_file], key_columns, spec, POSITION_COLUMNS), False))
    last = last_changes(frames, columns)
    if before is None or spec.plan.mode == Mode.SNAPSHOT:
        return net_changes(before, last, key, columns, first_load=first_load).persist(), ()
    # Only the rows whose key changed, and every row of a repaired bucket: the others are as they were. Read from
    # the version once, kept, and counted, so that Spark joins them knowing how few they are (``net_changes``).
    keys = last.select([column(k) for k in key])
    looked_up = without_keys(before, keys, key, "left_semi").persist()
    looked_up.count()
    gone = None
    if spec.buckets and spec.replaced:
        gone = without_keys(before.where(bucket_column(spec).isin(list(spec.replaced))), keys, key)
    # Kept until the net changes are: they are computed from it at their first use.
    net = net_changes(looked_up, last, key, columns, first_load=first_load, looked_up=True, gone=gone).persist()
    return net, (looked_up,)


def touched_partitions(spark: Any, spec: MergeSpec, layout: Partitioning, table_has_partitions: bool) -> set[str]:
    """The partitions (metastore texts) a merge rewrites: those of its upserts, those its rows left (the
    extraction found them in the before images), and, for rows read again from the source and a diff's deletes,
    the partitions their keys are in now: no event says where those were, so the table's key and partition columns
    are read to know."""
    upserts = hive_frame(spark, list(spec.upsert_files), spec.hive_columns, spec)
    texts = {metastore_value(row[0]) for row in upserts.select(partition_value(layout)).distinct().collect()}
    texts |= set(spec.left_partitions)
    if table_has_partitions and ((spec.buckets and spec.replaced) or spec.reread_rows):
        table = spark.table(spec.qualified_table)
        held = column(layout.column)
        found = []
        if spec.buckets and spec.replaced:  # a repair: every row of these buckets goes, wherever it is
            found.append(table.where(bucket_column(spec).isin(list(spec.replaced))).select(held))
        if spec.reread_rows:
            keys = upserts.select([column(name) for name in spec.hive_key])
            if spec.delete_file is not None and spec.plan.mode in (Mode.DIFF, Mode.HEAL):
                # A diff's deletes are keys alone: the partition each row was in is looked up as well.
                key_columns = [(name, hive) for name, hive in spec.hive_columns if name in spec.hive_key]
                keys = keys.unionByName(hive_frame(spark, [spec.delete_file], key_columns, spec)
                                        .select([column(name) for name in spec.hive_key]))
            found.append(without_keys(table, keys, spec.hive_key, "left_semi").select(held))
        for frame in found:
            texts |= {metastore_value(row[0]) for row in frame.distinct().collect()}
    return texts
