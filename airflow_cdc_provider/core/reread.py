"""What a run reads again of a table from the source besides its binlog range (``stages.reread`` reads it): the
rows the ``reread`` parameter selects, the buckets the table's last verify found different, or both; the SQL
condition of those rows; and what comes of it once the range is read (the buckets held back, the order of the files).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from airflow_cdc_provider.core.checksum import source_key_text
from airflow_cdc_provider.core.condition import Clause, SqlValue, literal_percent, parse_condition, to_sql
from airflow_cdc_provider.core.config import ConfigError, rendered_param
from airflow_cdc_provider.core.contract import CapturedTable, Reread, TablePlan
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.verify import RepairRequest
from airflow_cdc_provider.core.watermark import Watermark

_EXAMPLE = '{"shop.orders": "id BETWEEN 100 AND 200", "shop.customers": ""}'
ALLOW_KEY = "run: allow_reread:"


def reread_conditions(asked: object, tables: Sequence[CapturedTable], allowed: bool) -> dict[str, str]:
    """The ``reread`` parameter as the template renders it (JSON text, or a mapping): each table it names and
    its condition, stripped ("" reads the whole table).

    It is refused unless the configuration ``allowed`` it (``run: allow_reread:``: whoever may trigger a run is not
    always who may edit the DAG), unless it maps tables to conditions, unless every table it names is one of this
    run's ``tables`` (a condition meant for a table the run does not capture would otherwise be dropped without a
    word), and unless each condition is a plain condition on its table's columns (``core.condition``). The caller
    checks this before any lock is taken, so that a bad parameter changes nothing.
    """
    given = rendered_param(asked)
    if not given:
        return {}
    if not allowed:
        raise ConfigError(f"This run was triggered with the parameter reread ({_shown(asked)}), which this "
                          f"source's configuration does not allow: `{ALLOW_KEY}` is false, as by default. A reread "
                          "condition is written by whoever triggers the run and is read on the source server; to "
                          f"allow it, set `{ALLOW_KEY} true` in the configuration (docs/security.md), or trigger the "
                          "run without it. Nothing was changed.")
    if not isinstance(given, dict) or not all(isinstance(v, str) or v is None for v in given.values()):
        raise ConfigError(f"The parameter reread must map tables to conditions, like {_EXAMPLE} (an empty "
                          f"condition reads the whole table), got {asked!r}. Nothing was changed.")
    sources = {t.source: t for t in tables}
    unknown = sorted(set(given) - set(sources))
    if unknown:
        raise ConfigError(f"The parameter reread names {', '.join(unknown)}, which this run does not capture; "
                          f"its tables are {', '.join(sorted(sources))}. Nothing was changed.")
    conditions = {source: (where or "").strip() for source, where in given.items()}
    for source, where in conditions.items():
        if where:
            where_clause(where, source, sources[source].columns)  # refused here, before the server sees it
    return conditions


def _shown(asked: object) -> str:
    text = asked if isinstance(asked, str) else repr(asked)
    return text if len(text) <= 200 else text[:200] + "…"


def where_clause(where: str, source: str, columns: Iterable[tuple[str, str]]) -> Clause:
    """A reread condition on ``source`` (whose columns are ``columns``) as the provider writes it: parsed into the
    accepted forms only (``core.condition``, or ``BadRereadCondition``), names quoted, values bound."""
    return to_sql(parse_condition(where, TableName.parse(source), [name for name, _ in columns]))


def reread_clause(header: RawHeader, buckets: int, which: Iterable[int], where: str | None,
                  mariadb: bool) -> Clause:
    """The SQL condition of the rows to read again: the buckets ``which`` of ``buckets`` (``core.verify``), or
    the rows ``where`` selects (``where_clause``); TRUE for the whole table. Every number and literal is bound."""
    parts: list[str] = []
    args: list[SqlValue] = []
    chosen = sorted({int(b) for b in which})
    if buckets and chosen:
        key = literal_percent(source_key_text(header.columns, header.key, mariadb))
        parts.append(f"MOD(CRC32({key}), %s) IN ({', '.join(['%s'] * len(chosen))})")
        args.extend([int(buckets), *chosen])
    if where is not None and where.strip():
        clause = where_clause(where, header.table, header.columns)
        parts.append(f"({clause.sql})")
        args.extend(clause.args)
    return Clause(" OR ".join(parts) if parts else "TRUE", tuple(args))


def reread_for(mode: str, repair: RepairRequest | None, where: str | None) -> Reread | None:
    """What a table's run reads again: the buckets of its pending ``repair``, the rows ``where`` selects, or
    both, with the reason a person reads. Only an incremental run reads rows again apart: a snapshot reads the
    whole table anyway (``read_whole_by_snapshot``), and a table left as it is reads nothing."""
    if mode != Mode.INCREMENTAL or (repair is None and where is None):
        return None
    reasons = []
    if repair is not None:
        reasons.append(f"a repair of the {len(repair.which)} buckets that verify found different in version "
                       f"{repair.version}")
    if where is not None:
        reasons.append(f"the reread parameter: {where or 'the whole table'}")
    return Reread(buckets=repair.buckets if repair else 0, which=repair.which if repair else (),
                  where=where, reason="; ".join(reasons))


def read_whole_by_snapshot(mode: str, repair: RepairRequest | None, where: str | None) -> bool:
    """Whether rows were asked for again of a table that takes a snapshot in this run: it reads them anyway,
    with the rest of the table, so nothing is read apart (worth saying, as the user asked for it)."""
    return mode == Mode.SNAPSHOT and (repair is not None or where is not None)


def reread_waits(table: TablePlan) -> bool:
    """Whether the rows the table's plan asks for again wait for the next run: its columns changed since its
    version, so rows read now hold the new columns while the range's own rows start from the version's. The
    next run, once this one has merged the change, starts from the new columns and reads them."""
    return (table.plan.start_columns or table.table.columns) != table.table.columns


def second_pass_needed(end: Watermark, high: Watermark, reread: Collection[str]) -> bool:
    """Whether the binlog after the range is read too: the range ended before the rows were read again (at its
    ``stop_before``), so a re-read row the binlog changed between the range's end and the read is newer than the
    range. Without re-read rows, or with a range that ends at the read, there is nothing to drop."""
    return end != high and bool(reread)


def held_buckets(asked: Reread, changed: Collection[int]) -> set[int]:
    """The buckets asked for that are held back: one holding a key the binlog ``changed`` after the range's end
    is not replaced in this run, as what it held at the range's end is not known (a later repair has it)."""
    return set(changed) & set(asked.which)


def replaced(asked: Reread | None, held: Collection[int] | None) -> Reread | None:
    """What was read again of a table: as asked, less the buckets ``held`` back; None when nothing was read
    again (``held`` None: nothing was asked, or the read waits for the next run)."""
    if asked is None or held is None:
        return None
    return asked.model_copy(update={"which": tuple(b for b in asked.which if b not in held)})


def replay_order(reread_files: Sequence[str], binlog_files: Sequence[str]) -> list[str]:
    """A table's raw files in the order the replay takes them: the re-read rows first, then the binlog's. The
    replay keeps the last record of each key, so a row the binlog changed in the range takes the binlog's
    version, the row at the range's end; the re-read one may predate that change."""
    return [*reread_files, *binlog_files]
