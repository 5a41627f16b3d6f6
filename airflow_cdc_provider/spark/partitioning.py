"""The partition value of each row as a Spark column: ``core.partitioning``'s ``Partitioning.value``, in Spark.

It reads a frame in the Hive table's form (lower-case names, Hive types, a DATETIME as the instant its digits name
in the readers' zone: ``merge_rows.hive_frame``), in a session in UTC, as the merge job's frames are. Every
reference is a column object (``spark.names``) and every number a literal of the parsed spec: no text of the
spec or the table reaches an expression.
"""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.partitioning import TIME_FORMATS, TIME_TRANSFORMS, Partitioning, Transform
from airflow_cdc_provider.spark.names import column

_BIGINT_MIN = -(2**63)


def partition_value(partitioning: Partitioning) -> Any:
    """The partition column's value of each row (NULL for the NULL partition), named as the partition column."""
    from pyspark.sql import functions as F


    spec = partitioning.spec
    source = partitioning.source_column
    value = column(source.lower())
    kind = partitioning.source_kind
    zone = partitioning.time_zone
    if spec.transform is Transform.IDENTITY:
        result = F.when(value != F.lit(""), value) if partitioning.hive_type == "string" else value
    elif spec.transform in TIME_TRANSFORMS:
        # A DATETIME is held as the instant of its digits in the zone, a TIMESTAMP is its instant: both shown as
        # a reader in the zone sees them. A DATE has no zone.
        shown = F.from_utc_timestamp(value, zone) if kind in ("datetime", "timestamp") and zone != "UTC" else value
        result = F.date_format(shown, TIME_FORMATS[spec.transform])
    elif spec.transform is Transform.TRUNCATE:
        width = F.lit(spec.argument).cast(partitioning.hive_type)
        number = value.cast(partitioning.hive_type)
        lower = number - F.pmod(number, width)  # pmod is never negative: the floor of the range
        if partitioning.hive_type == "bigint":
            # The lowest value whose range starts within a bigint: below it, the subtraction would overflow.
            lowest = _BIGINT_MIN + (-_BIGINT_MIN) % (spec.argument or 1)
            result = F.when(number >= F.lit(lowest), lower)
        else:
            result = lower
    else:
        # Verify's bucket rule, imported here: verify's module needs pandas, which the merge of a table partitioned
        # otherwise (or not at all) does not.
        from airflow_cdc_provider.spark.verify_job import bucket_of, key_text

        text = key_text([(source, partitioning.source_type)], [source], True, zone)
        result = F.when(value.isNotNull(), bucket_of(text, spec.argument or 1))
    return result.cast(partitioning.hive_type).alias(partitioning.column)
