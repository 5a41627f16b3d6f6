"""The Airflow asset of each Hive table the pipeline writes, and what each commit's event says of it.

The URI is ``hive://<metastore host>:<port>/<database>/<table>`` (the thrift metastore's address: the namespace
OpenLineage names Hive datasets in, ``core.lineage``), or ``hive://embedded/<database>/<table>`` for the embedded
metastore of tests and demos. No community provider registers the ``hive`` scheme, and this package registers
none: a URI of its own form would clash with nobody. (The source tables are not assets: they are reported to
OpenLineage, ``core.lineage``.)
"""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.changelog import VERSION_COLUMN
from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.history import snapshots_table
from airflow_cdc_provider.core.lineage import hive_namespace


def hive_asset_uri(metastore_uri: str | None, hive_table: str) -> str:
    """The asset URI of a Hive table (``database.table``) in the metastore at ``metastore_uri``."""
    database, table = hive_table.split(".", 1)
    return f"{hive_namespace(metastore_uri)}/{database}/{table}"


def changelog_event_extra(outcome: TableOutcome) -> dict[str, Any]:
    """What a commit's event on its changelog table carries: the version whose changes it added, and where."""
    assert outcome.changelog is not None
    return {
        "source": outcome.source, "table": outcome.hive_table, "version": outcome.version,
        "partition": {outcome.changelog.day_column: outcome.changelog.day, VERSION_COLUMN: outcome.version},
        "rows": outcome.changelog.rows, "as_of": outcome.as_of.isoformat() if outcome.as_of else None,
    }


def beside_events(outcome: TableOutcome) -> list[tuple[str, dict[str, Any]]]:
    """The asset events a commit gives the tables beside its table (``database.table`` and extra): its changelog
    table, which gained the version's partition; its snapshots table, when the version is the snapshot of days;
    its history table, which the version changed."""
    database, table = outcome.hive_table.split(".", 1)
    common = {"source": outcome.source, "table": outcome.hive_table, "version": outcome.version,
              "as_of": outcome.as_of.isoformat() if outcome.as_of else None}
    events = []
    if outcome.changelog is not None:
        events.append((f"{database}.{outcome.changelog.table}", changelog_event_extra(outcome)))
    if outcome.snapshot_days:
        events.append((f"{database}.{snapshots_table(table)}", {**common, "days": list(outcome.snapshot_days)}))
    if outcome.history is not None:
        events.append((f"{database}.{outcome.history.table}",
                       {**common, "day": outcome.history.day, "opened": outcome.history.opened,
                        "closed": outcome.history.closed}))
    return events


def event_extra(outcome: TableOutcome) -> dict[str, Any]:
    """What a commit's asset event carries: the version, where and when it reflects the source, the changes."""
    return {
        "source": outcome.source, "version": outcome.version, "mode": outcome.mode,
        "watermark": outcome.watermark.to_xcom() if outcome.watermark else None,
        "as_of": outcome.as_of.isoformat() if outcome.as_of else None,
        "inserted": outcome.changes.get("I", 0), "updated": outcome.changes.get("U", 0),
        "deleted": outcome.changes.get("D", 0), "rows": outcome.rows,
        "location": outcome.location,  # where the version's files are
        # A heal: why the chain broke, and what the diff read (``core.contract.Healed``); None for any other commit.
        "healed": outcome.healed.to_xcom() if outcome.healed is not None else None,
    }
