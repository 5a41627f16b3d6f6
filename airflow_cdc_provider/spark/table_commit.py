"""A plain table's columns and location changed in one metastore call: the commit of a version whose columns' Hive
types differ from the table's.

Spark SQL has no statement for it: ``ALTER TABLE … SET LOCATION`` keeps the columns, ``ALTER TABLE … CHANGE
COLUMN`` refuses a type change, and the external catalog's ``alterTable`` keeps the old schema by design. Spark's
Hive client (``HiveClient.alterTable``) sends the whole definition it is given to the metastore's ``alter_table``,
which runs in one transaction: the table is given the new version's location and its columns at once, and a reader
sees the old definition over the old files or the new over the new.

The metastore may refuse a change of a column's type it does not count as compatible
(``hive.metastore.disallow.incompatible.col.type.changes``, on by default: ``int`` → ``bigint`` passes, ``string``
→ ``int`` does not, nor columns that change places); it then changes nothing, and ``switch_definition`` says why,
for the caller to define the table again another way. Nothing here runs SQL: the names and the columns go to the
client as values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_cdc_provider.core.identifiers import backticked
from airflow_cdc_provider.spark.names import columns_ddl
from airflow_cdc_provider.spark.partition_commit import STATISTICS, copy_arity

# Spark's copy of the table's schema in its properties, and its statistics: the new columns and files make them
# wrong, and without them Spark reads the metastore's columns (lower-case names, as every column here is).
_STALE = ("spark.sql.sources.schema", "spark.sql.statistics.")


def switch_definition(spark: Any, database: str, table: str, columns: Sequence[tuple[str, str]],
                      location: str) -> str | None:
    """Point the plain table ``database.table`` at ``location`` with ``columns`` (Hive name, Hive type), in one
    ``alter_table``; None when done, else the metastore's refusal (nothing was changed)."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    client = spark._jsparkSession.sharedState().externalCatalog().unwrapped().client()
    old = client.getTable(database, table)
    if old.partitionColumnNames().nonEmpty():
        raise ValueError(f"{database}.{table} is partitioned: its partitions hold columns of their own.")
    fields = [getattr(old, f"copy$default${n}")() for n in range(1, copy_arity(old) + 1)]
    storage_at, schema_at, properties_at = (_only(fields, getter()) for getter in (old.storage, old.schema,
                                                                                     old.properties))
    if storage_at is None or schema_at is None or properties_at is None:
        return ("this Spark's CatalogTable does not hold its storage, schema and properties in one field each, as "
                "the one-call commit reads them")
    storage = old.storage()
    parts = [getattr(storage, f"copy$default${n}")() for n in range(1, copy_arity(storage) + 1)]
    path = jvm.org.apache.hadoop.fs.Path(location)
    parts[0] = jvm.scala.Option.apply(path.getFileSystem(spark._jsc.hadoopConfiguration()).makeQualified(path).toUri())
    fields[storage_at] = storage.copy(*parts)
    fields[schema_at] = jvm.org.apache.spark.sql.types.StructType.fromDDL(columns_ddl(columns))
    properties = old.properties()
    keys = properties.keys().toList()
    for i in range(keys.length()):
        key = str(keys.apply(i))
        if key.startswith(_STALE) or key in STATISTICS:
            properties = getattr(properties, "$minus")(key)
    fields[properties_at] = properties
    try:
        client.alterTable(old.copy(*fields))
    except Py4JJavaError as error:
        said = _causes(error.java_exception)  # the metastore's refusal comes wrapped (a reflective call)
        if "InvalidOperationException" not in said and "incompatible" not in said.lower():
            raise
        return said
    spark.catalog.refreshTable(".".join(backticked(name) for name in (database, table)))
    return None


def _causes(exception: Any) -> str:
    """A Java exception and the exceptions that caused it, as they print."""
    said: list[str] = []
    while exception is not None and len(said) < 8:
        said.append(str(exception.toString()))
        exception = exception.getCause()
    return "; caused by ".join(said)


def _only(fields: list[Any], value: Any) -> int | None:
    """The one place of ``value`` among a Scala case class's fields (as ``copy$default$N`` gives them), or None."""
    found = [i for i, field in enumerate(fields) if hasattr(field, "equals") and field.equals(value)]
    return found[0] if len(found) == 1 else None
