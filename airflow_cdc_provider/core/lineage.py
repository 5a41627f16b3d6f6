"""What a merge tells OpenLineage about each table it committed: the MySQL table read, the Hive table written,
both schemas, and the source column each Hive column holds.

Datasets are named as OpenLineage's naming conventions say, so that they meet the same tables reported by other
jobs: a MySQL table is namespace ``mysql://<host>:<port>``, name ``<schema>.<table>``; a Hive table is namespace
``hive://<metastore host>:<port>``, name ``<database>.<table>`` (``hive://embedded`` for the embedded metastore
of tests and demos, which has no address). The operators turn these values into OpenLineage's classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

EMBEDDED = "embedded"
Fields = tuple[tuple[str, str], ...]  # (column, type), in the table's order


@dataclass(frozen=True)
class LineageDataset:
    namespace: str
    name: str
    fields: Fields


@dataclass(frozen=True)
class TableLineage:
    """One table's copy: ``source`` (MySQL) read, ``target`` (Hive) written; ``columns`` maps each Hive column
    to the source column it holds unchanged."""

    source: LineageDataset
    target: LineageDataset
    columns: tuple[tuple[str, str], ...]


def mysql_namespace(host: str, port: int | None) -> str:
    return f"mysql://{host}:{port or 3306}"


def hive_namespace(metastore_uri: str | None) -> str:
    """The namespace of the tables of the metastore at ``metastore_uri`` (the first, when it lists several)."""
    if not metastore_uri:
        return f"hive://{EMBEDDED}"
    parsed = urlsplit(metastore_uri.split(",")[0].strip())
    if not parsed.hostname:
        raise ValueError(f"The metastore URI {metastore_uri!r} has no host: give thrift://host:port.")
    return f"hive://{parsed.hostname}:{parsed.port or 9083}"


def table_lineage(source: str, source_columns: Sequence[tuple[str, str]], hive_table: str,
                  hive_columns: Sequence[tuple[str, str]], mysql: str, hive: str,
                  partition: tuple[str, str, str] | None = None) -> TableLineage:
    """The lineage of ``source`` (``schema.table``, its MySQL columns and types) copied to ``hive_table``
    (``database.table``, its columns as Hive has them: lower case, Hive types), in the namespaces ``mysql`` and
    ``hive``. A Hive column holds the source column of the same name (MySQL's names do not depend on case); a
    column kept after the source dropped it (``schema_changes: evolve``) has no source column now. ``partition``
    (its name, Hive type and source column) is a partitioned table's partition column, the last of the Hive
    table's, computed from that source column."""
    by_name = {name.lower(): name for name, _ in source_columns}
    columns = tuple((column, by_name[column.lower()]) for column, _ in hive_columns if column.lower() in by_name)
    fields = tuple(hive_columns)
    if partition is not None:
        name, hive_type, source_column = partition
        fields += ((name, hive_type),)
        columns += ((name, source_column),)
    return TableLineage(LineageDataset(mysql, source, tuple(source_columns)),
                        LineageDataset(hive, hive_table, fields), columns)
