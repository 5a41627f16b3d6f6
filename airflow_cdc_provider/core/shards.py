"""Shards: many source tables (``orders_00`` … ``orders_63``, in several schemas, on several servers) copied into
one Hive table (``shards:`` on a table entry).

Each shard is a table of its own to every stage (its own key, watermark or digests, ledger and lock, in its own
directory of the work directory), and a partition of the Hive table to the readers: the Hive table is
partitioned by the shard's identity, ``_source_schema`` and ``_source_table`` (and ``_source_server`` first, where
the entry names the server its group reads). A shard's run writes a new version of its own rows only and points
its partition at it, one metastore call, so the shards of two servers' groups commit without waiting for each
other and never overwrite each other's rows; a run's cost follows its shard, not the table. A row is identified
in Hive by its shard and its key.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.model import Model

SERVER_COLUMN, SCHEMA_COLUMN, TABLE_COLUMN = "_source_server", "_source_schema", "_source_table"
SHARD_COLUMNS = (SERVER_COLUMN, SCHEMA_COLUMN, TABLE_COLUMN)


class Sharding(Model):
    """A table entry's ``shards:``: the tables it selects are shards of its one ``target:``. ``server``: the name
    of the server this configuration reads, for a Hive table whose shards come from several (each group names
    its own)."""

    server: str | None = None


class Shard(Model):
    """One source table as a shard of its Hive table: its values of the shard columns."""

    server: str | None = None
    source_schema: str
    source_table: str

    @property
    def values(self) -> tuple[tuple[str, str], ...]:
        """Its partition of the Hive table: (column, value) in the partition columns' order."""
        own = ((SCHEMA_COLUMN, self.source_schema), (TABLE_COLUMN, self.source_table))
        return ((SERVER_COLUMN, self.server), *own) if self.server is not None else own

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.values)

    @property
    def name(self) -> str:
        return ".".join(value for _, value in self.values)

    @property
    def partition_dir(self) -> str:
        """Its partition's directory in the Hive table's, ``_source_schema=shop/_source_table=orders``, escaped as
        Hive and Spark escape a partition's path (the merge checks it against Spark's own)."""
        return "/".join(f"{_escaped(column)}={_escaped(value)}" for column, value in self.values)

    @property
    def path(self) -> str:
        """Its directory under the Hive table's in the work directory: each value escaped, one level each (a
        name may hold a dot or a slash)."""
        return "/".join(quote(value, safe="") for _, value in self.values)


# The characters Hive's and Spark's ``escapePathName`` write as ``%XX`` in a partition's directory name.
_ESCAPED = frozenset([*map(chr, range(1, 0x20)), '"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[",
                      "]", "^"])


def _escaped(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


class BadShards(CdcError):
    """A table entry's ``shards:`` that cannot go with the table or its other settings."""


SHARD_PARTITION_TYPE = "string"


def shard_problem(table: str, shard: Shard, columns: Sequence[tuple[str, str]], partitioned: bool, changelog: bool,
                  history: bool) -> None:
    """Refuse what a shard cannot have: a column named like a shard column, a ``partition_by:`` (the Hive table is
    partitioned by the shards), a changelog or a history (kept per Hive table, which many shards' runs write)."""
    taken = sorted({name for name, _ in columns} & set(shard.columns))
    if taken:
        raise BadShards(f"The table {table} is a shard (`shards:`), and it has the column(s) {', '.join(taken)}, "
                        "which the Hive table of the shards adds itself: rename them at the source, or capture the "
                        "table on its own.")
    for wanted, setting in ((partitioned, "partition_by:"), (changelog, "changelog:"), (history, "history:")):
        if wanted:
            raise BadShards(f"The table {table} is a shard (`shards:`), and it is given a `{setting}`: a Hive table of "
                            f"shards is partitioned by them, and has no changelog or history. Set "
                            f"`{setting} {'null' if setting == 'partition_by:' else 'false'}` in its entry, or capture "
                            "the table on its own.")
