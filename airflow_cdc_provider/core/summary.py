"""The run's summary a person reads: one short line per table, from its ``TableOutcome``."""

from __future__ import annotations

import datetime as dt

from airflow_cdc_provider.core.contract import TableOutcome, TableVerification
from airflow_cdc_provider.core.modes import Mode, Status, VerifyStatus

_STAGES = ("snapshot", "diff", "extract", "replay", "heal", "merge")


def summary_line(outcome: TableOutcome, now: dt.datetime) -> str:
    """``shop.orders → ods.orders: incremental mysql-bin.000003:4 → mysql-bin.000003:9120, +12 ~40 -3, version 5,
    lag 42 s; extract 1.2 s, replay 0.3 s, merge 8.1 s`` (inserts, updates, deletes read from the binlog or
    found by a diff; a snapshot's rows as inserts; the lag from the moment the version reflects to ``now``). A
    table read without the binlog (diff mode) shows the moment of its read instead of binlog positions."""
    parts = [f"{outcome.source} → {outcome.hive_table}: {outcome.status}"]
    what = str(outcome.mode)
    if outcome.start is not None and outcome.watermark is not None:
        start, end = outcome.start, outcome.watermark
        what += f" {start.file}:{start.position} → {end.file}:{end.position}"
    elif outcome.watermark is not None:
        what += f" as of {outcome.watermark.file}:{outcome.watermark.position}"
    elif outcome.as_of is not None and outcome.mode == Mode.DIFF:  # read without the binlog: the moment of its read
        what += f" as of {outcome.as_of.isoformat(timespec='seconds')} (read without the binlog)"
    # A table stopped before the run did anything to it (the check refused it) has no way in to tell.
    details = [] if outcome.mode == Mode.NOTHING and outcome.status == Status.FAILED else [what]
    if outcome.changes:
        details.append(" ".join(f"{sign}{outcome.changes.get(op, 0):,}" for sign, op in (("+", "I"), ("~", "U"),
                                                                                          ("-", "D"))))
    if outcome.version is not None:
        details.append(f"version {outcome.version}")
    if outcome.partitions is not None:
        details.append(f"partitions {outcome.rewritten_partitions:,} rewritten, {outcome.emptied_partitions:,} "
                       f"emptied of {outcome.partitions:,}")
    if outcome.changelog is not None:
        details.append(f"changelog {outcome.changelog.rows:,} rows ({outcome.changelog.day_column}="
                       f"{outcome.changelog.day})")
    if outcome.as_of is not None:
        details.append(f"lag {max(0.0, (now - outcome.as_of).total_seconds()):.0f} s")
    line = " ".join([parts[0], ", ".join(details)]) if details else parts[0]
    stages = [f"{stage} {outcome.seconds[stage]:.1f} s" for stage in _STAGES if stage in outcome.seconds]
    if stages:
        line += "; " + ", ".join(stages)
    if outcome.healed is not None and outcome.healed.reloaded and outcome.status == Status.COMMITTED:
        line += f"; loaded anew ({outcome.healed.rows:,} rows read, the Hive table defined again): {outcome.healed.why}"
    elif outcome.healed is not None and outcome.status == Status.COMMITTED:
        healed = outcome.healed
        line += (f"; healed by a diff ({healed.upserts:,} rows read, {healed.deletes:,} gone, {healed.bytes_sent:,} "
                 f"bytes from the server): {healed.why}")
    if outcome.status == Status.FAILED:
        line += f"; {outcome.error}"
    elif outcome.reason and outcome.status in (Status.NOTHING, Status.UNCHANGED):
        line += f"; {outcome.reason}"
    return line


def verify_note(found: TableVerification) -> str:
    """What the run's verify found for a table, for its summary line: ``verify (slice 3 of 24): clean``, or the
    keys that differ and that a repair reads them again, or why it was not verified."""
    where = f"verify ({found.slice})" if found.slice is not None else "verify (whole table)"
    if found.status == VerifyStatus.CLEAN:
        return f"{where}: clean"
    if found.status == VerifyStatus.NOT_VERIFIED:
        return f"{where}: not verified, {found.reason}"
    said = f"{where}: {found.differences:,} keys differ in {len(found.repair_buckets):,} of {found.buckets:,} buckets"
    if found.repair_buckets:
        said += ", left for a repair"
    if found.history_buckets:
        said += f"; the history's open rows differ in {len(found.history_buckets):,} buckets"
    return said
