"""The SCD2 step on Spark (``spark.history``) driven over a month of random versions of a small table, against a
model in Python: for every day D the history as of D (``start_date <= D < end_date``, no deletion marker) is the
table at the end of D, no key has two open rows, and each step closes exactly the open rows of the keys its
version changed and opens exactly their new values. Both granularities, both ways of keeping deletes. One Spark
session, in this process, without Hive: nothing here needs a metastore."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from functools import reduce
from typing import Any

import pytest

from airflow_cdc_provider.core.changelog import version_day
from airflow_cdc_provider.core.history import HISTORY_PARTITION, OPEN_END, HistorySettings, history_columns
from airflow_cdc_provider.spark.names import column
from tests.integration.hive_helpers import local_spark

pytestmark = pytest.mark.spark

# A key part can be NULL in Hive (a zero date): k2 is, now and then.
COLUMNS = [("k1", "int"), ("k2", "string"), ("v", "int"), ("note", "string")]
KEY = ["k1", "k2"]
START = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
DAYS = 12


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local session for the module's tests, in UTC."""
    # Tiny frames, many plans: compiling each plan's code would cost more than running it interpreted.
    with local_spark("history", {"spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "1",
                                 "spark.ui.showConsoleProgress": "false", "spark.sql.codegen.wholeStage": "false",
                                 "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                                 "spark.sql.adaptive.enabled": "false"}) as session:
        yield session


Key = tuple[Any, ...]
Row = dict[str, Any]


def versions(rng: random.Random) -> list[dt.datetime]:
    """The moments of the versions: none on some days, several on others, some at midnight exactly."""
    moments = [START + dt.timedelta(hours=3)]
    for n in range(DAYS):
        day = START + dt.timedelta(days=n)
        count = rng.choice([0, 1, 1, 2, 3])
        times = sorted(rng.sample(range(1, 24 * 60), count))
        if rng.random() < 0.15:
            times = [0, *times]  # at the day's start: of the day before, for the version after it
        moments += [day + dt.timedelta(minutes=m) for m in times if day + dt.timedelta(minutes=m) > moments[-1]]
    return moments


def random_version(rng: random.Random, state: dict[Key, Row], gone: list[Key], next_id: list[int]) -> dict[Key, Row]:
    """The table after a few random changes to ``state``: inserts, updates, deletes, a key deleted before coming
    back, and now and then none at all (a version with no changes)."""
    state = dict(state)
    if rng.random() < 0.1:
        return state
    for _ in range(rng.randint(1, 6)):
        roll = rng.random()
        if roll < 0.3 or not state:
            if gone and rng.random() < 0.4:
                key = gone.pop(rng.randrange(len(gone)))  # re-inserted after its delete
            else:
                next_id[0] += 1
                key = (next_id[0], None if rng.random() < 0.2 else rng.choice(["eu", "us"]))
            if key not in state:
                state[key] = {"k1": key[0], "k2": key[1], "v": rng.randint(0, 9), "note": rng.choice([None, "a", "b"])}
        elif roll < 0.75:
            key = rng.choice(sorted(state, key=str))
            state[key] = {**state[key], "v": rng.randint(0, 9), "note": rng.choice([None, "a", "b", "c"])}
        else:
            key = rng.choice(sorted(state, key=str))
            del state[key]
            gone.append(key)
    return state


def net(before: dict[Key, Row], after: dict[Key, Row]) -> list[Row]:
    """The net changes from ``before`` to ``after``, as ``spark.changelog.net_changes`` gives them."""
    out = []
    for key in set(before) | set(after):
        was, now = before.get(key), after.get(key)
        if was == now:
            continue
        if was is None:
            out.append({**now, "_change_type": "insert"})
        elif now is None:
            out.append({**was, "_change_type": "delete"})
        else:
            out += [{**was, "_change_type": "update_preimage"}, {**now, "_change_type": "update_postimage"}]
    return out


ARROW = {"int": "int32", "bigint": "int64", "string": "string", "boolean": "bool_"}


def local(spark: Any, rows: list[list[Any]], columns: list[tuple[str, str]]) -> Any:
    """A frame of ``rows``, held in the plan itself (a local relation, from Arrow): Spark then broadcasts it
    rather than shuffle it, and a step costs a fraction of the time."""
    import pyarrow as pa

    schema = pa.schema([(name, pa.timestamp("us", "UTC") if hive == "timestamp" else getattr(pa, ARROW[hive])())
                        for name, hive in columns])
    return spark.createDataFrame(pa.Table.from_pylist([dict(zip(schema.names, row)) for row in rows], schema=schema))


def plain(row: Any) -> Row:
    """A collected row as the model holds it: timestamps as aware UTC instants (collected, they are naive in this
    process's zone)."""
    return {k: v.astimezone(dt.UTC) if isinstance(v, dt.datetime) else v for k, v in row.asDict().items()}


def frozen(rows: list[Row]) -> list[tuple]:
    return sorted((tuple(sorted(row.items(), key=lambda kv: kv[0])) for row in rows), key=repr)


def key_of(row: Row) -> Key:
    return tuple(row[k] for k in KEY)


def expected_step(open_rows: list[Row], changes: list[Row], settings: HistorySettings, day: str, moment: dt.datetime,
                  version: int) -> tuple[list[Row], list[Row]]:
    """The model of one step: the rows it keeps open, and those it closes."""
    changed = {key_of(c) for c in changes}
    closed = [{**row, "is_current": False, **({"end_time": moment} if settings.granularity == "run" else {}),
               HISTORY_PARTITION: day}
              for row in open_rows if key_of(row) in changed
              and not (settings.granularity == "day" and row["start_date"] == day)]
    kept = [row for row in open_rows if key_of(row) not in changed]
    opening = [c for c in changes if c["_change_type"] in ("insert", "update_postimage")
               or (c["_change_type"] == "delete" and settings.hard_deletes == "new_record")]
    return kept + [opened(c, settings, day, moment, version, c["_change_type"] == "delete") for c in opening], closed


def opened(row: Row, settings: HistorySettings, day: str, moment: dt.datetime, version: int, deleted: bool) -> Row:
    extra = {"start_date": day, "start_time": moment, "end_time": None, "is_current": True, "is_deleted": deleted,
             "_start_version": version}
    names = [name for name, _ in history_columns(COLUMNS, settings)]
    return {name: row[name] if name in row and name not in extra else extra[name] for name in names}


def as_of(history: list[Row], day: str) -> list[Row]:
    """The table as of ``day`` by the history's rows."""
    return [{name: row[name] for name, _ in COLUMNS} for row in history
            if row["start_date"] <= day < row[HISTORY_PARTITION] and not row.get("is_deleted")]


# Each granularity and each way of keeping deletes, in two settings (all four pairs would double the time): whole
# days with deletion markers (a marker that starts and ends within a day is dropped too), and run to run.
SETTINGS = [HistorySettings(scd2=True, granularity="day", hard_deletes="new_record"),
            HistorySettings(scd2=True, granularity="run", hard_deletes="invalidate")]
# Every setting's columns, for one frame of them all: a Spark job costs far more here than its rows do.
ALL = [*history_columns(COLUMNS, HistorySettings(scd2=True, granularity="run", hard_deletes="new_record")),
       (HISTORY_PARTITION, "string")]


def test_the_history_as_of_each_day_is_the_table_at_its_end_and_a_step_touches_only_the_keys_changed(spark):
    """One month of versions of one table, kept as a history under each setting: each version's step computed
    on Spark, a day's steps (of every setting) collected in one job, against the model of every step."""
    from pyspark.sql.functions import lit

    from airflow_cdc_provider.spark.history import initial_open, scd2_step

    rng = random.Random(20261126)
    moments = versions(rng)
    gone: list[Key] = []
    next_id = [0]
    states = [random_version(rng, {}, gone, next_id)]
    days = [version_day(moments[0], None, "UTC")]
    for version, moment in enumerate(moments[1:], start=2):
        states.append(random_version(rng, states[-1], gone, next_id))
        days.append(version_day(moment, moments[version - 2], "UTC"))
    changes = [[], *(net(a, b) for a, b in zip(states, states[1:]))]
    # The month has what it must: versions without changes, a key back after its delete, several versions filed
    # under one day, a key with a NULL part updated and deleted.
    assert len(moments) > DAYS and any(not c for c in changes[1:])
    assert any(k in b and k not in a and any(k in s for s in states[:i]) for i, (a, b) in
               enumerate(zip(states, states[1:]), start=1) for k in b), "no key came back after its delete"
    assert len(set(days)) < len(days)
    assert {c["_change_type"] for c in sum(changes, []) if c["k2"] is None} == {
        "insert", "update_preimage", "update_postimage", "delete"}

    model: list[list[Row]] = [[] for _ in SETTINGS]  # each setting's open rows, as the model has them
    closed_all: list[list[Row]] = [[] for _ in SETTINGS]
    groups: dict[dt.date, list[int]] = {}
    for index, moment in enumerate(moments):
        groups.setdefault(moment.date(), []).append(index)
    for indexes in groups.values():
        # One frame of each version's changes, for every setting's step.
        changed = {index: local(spark, [[c[name] for name, _ in COLUMNS] + [c["_change_type"]] for c in changes[index]],
                                [*COLUMNS, ("_change_type", "string")]) for index in indexes if index}
        frames = []  # (setting, version, closed or not) tagged, over ALL
        wanted: dict[tuple[int, int, bool], list[Row]] = {}
        for n, settings in enumerate(SETTINGS):
            names = history_columns(COLUMNS, settings)
            open_df = None if indexes[0] == 0 else local(spark, [[r[name] for name, _ in names] for r in model[n]],
                                                          names)
            for index in indexes:
                version, day, moment = index + 1, days[index], moments[index]
                if index == 0:
                    table = local(spark, [list(r.values()) for r in states[0].values()], COLUMNS)
                    open_df = initial_open(table, COLUMNS, settings, day, moment, version)
                    model[n] = [opened(r, settings, day, moment, version, False) for r in states[0].values()]
                    continue
                open_df, closed = scd2_step(open_df, changed[index], KEY, COLUMNS, settings, day, moment, version)
                assert closed.columns == [*(name for name, _ in names), HISTORY_PARTITION]
                frames.append((n, version, True, closed))
                model[n], wanted[n, version, True] = expected_step(model[n], changes[index], settings, day, moment,
                                                                   version)
            assert open_df.columns == [name for name, _ in names]
            frames.append((n, indexes[-1] + 1, False, open_df))
            wanted[n, indexes[-1] + 1, False] = model[n]
        # Each setting's frames tagged, then brought to ALL's columns: few calls to build, one job to run.
        union = None
        for n in range(len(SETTINGS)):
            mine = [frame.select("*", *([] if is_closed else [lit(None).cast("string").alias(HISTORY_PARTITION)]),
                                 lit(version).alias("cdc,v"), lit(is_closed).alias("cdc,c"))
                    for m, version, is_closed, frame in frames if m == n]
            tagged = reduce(lambda a, b: a.union(b), mine)
            have = set(tagged.columns)
            padded = tagged.select([lit(n).alias("cdc,n"), column("cdc,v"), column("cdc,c")]
                                   + [column(name) if name in have else lit(None).cast(hive).alias(name)
                                      for name, hive in ALL])
            union = padded if union is None else union.union(padded)
        got: dict[tuple[int, int, bool], list[Row]] = {tag: [] for tag in wanted}
        for row in union.collect():
            row = plain(row)
            names = [name for name, _ in history_columns(COLUMNS, SETTINGS[row["cdc,n"]])]
            got[row["cdc,n"], row["cdc,v"], row["cdc,c"]].append(
                {name: row[name] for name in names + ([HISTORY_PARTITION] if row["cdc,c"] else [])})
        for (n, version, is_closed), rows in wanted.items():
            # A step closes the open rows of the keys its version changed, nothing else; and opens their values.
            assert frozen(got[n, version, is_closed]) == frozen(rows), (SETTINGS[n], version, is_closed)
            if is_closed:
                # As many as the keys the version changed, at most: never a row of a key it did not change.
                assert len(rows) <= len({key_of(c) for c in changes[version - 1]})
                closed_all[n] += rows
            else:
                opened_keys = [key_of(r) for r in got[n, version, is_closed]]
                assert len(set(opened_keys)) == len(opened_keys), "a key with two open rows"

    first = dt.date.fromisoformat(days[0])
    for n, settings in enumerate(SETTINGS):
        history = closed_all[n] + [{**row, HISTORY_PARTITION: OPEN_END} for row in model[n]]
        for offset in range(DAYS + 2):
            day = (first + dt.timedelta(days=offset)).isoformat()
            # The table at the end of ``day``: after the last version whose changes belong to a day up to it.
            last = max(i for i, d in enumerate(days) if d <= day)
            assert frozen(as_of(history, day)) == frozen(list(states[last].values())), (settings, day)
        assert frozen([{name: r[name] for name, _ in COLUMNS} for r in model[n] if not r.get("is_deleted")]) == frozen(
            list(states[-1].values())), "the open rows are the table now"
        if settings.granularity == "day":  # a value that held only within a day left no row
            assert all(r["start_date"] < r[HISTORY_PARTITION] for r in history)


def test_net_changes_by_lookup_and_by_full_join_are_the_difference_of_two_versions(spark):
    """``spark.changelog.net_changes`` both ways: a merge's (the rows its keys had, looked up, beside the rows of
    a repaired bucket that go) and a load's (the whole version before against the whole new one)."""
    from airflow_cdc_provider.spark.changelog import last_changes, net_changes

    rng = random.Random(11)
    gone: list[Key] = []
    next_id = [0]
    before = random_version(rng, {}, gone, next_id)
    for _ in range(12):
        before = random_version(rng, before, gone, next_id)
    after = before
    while after == before:
        after = random_version(rng, before, gone, next_id)
    unchanged = sorted((k for k in before if after.get(k) == before[k]), key=str)
    assert len(unchanged) >= 4 and any(k[1] is None for k in before), "a test of too few rows"
    # Keys updated back to their values (an upsert, no change), a key inserted and deleted (a delete of a key the
    # version never had), and two rows of a repaired bucket, gone from the source without an event.
    back, repaired = unchanged[:2], unchanged[2:4]
    upserts = [row for key, row in after.items() if before.get(key) != row] + [before[k] for k in back]
    deletes = [k for k in before if k not in after] + [(10_000, None)]
    key_columns = [(name, hive) for name, hive in COLUMNS if name in KEY]
    last = last_changes([(local(spark, [list(r.values()) for r in upserts], COLUMNS), True),
                         (local(spark, [list(k) for k in deletes], key_columns), False)], COLUMNS)
    touched = {key_of(r) for r in upserts} | set(deletes)
    looked_up = local(spark, [list(r.values()) for k, r in before.items() if k in touched], COLUMNS)
    got = net_changes(looked_up, last, KEY, COLUMNS, first_load=True, looked_up=True,
                      gone=local(spark, [list(before[k].values()) for k in repaired], COLUMNS))
    names = [name for name, _ in COLUMNS] + ["_change_type"]
    expected = net(before, {k: r for k, r in after.items() if k not in repaired})
    assert frozen([{n: r[n] for n in names} for r in got.collect()]) == frozen(expected)

    load = last_changes([(local(spark, [list(r.values()) for r in after.values()], COLUMNS), True)], COLUMNS)
    got = net_changes(local(spark, [list(r.values()) for r in before.values()], COLUMNS), load, KEY, COLUMNS,
                      first_load=True)
    assert frozen([{n: r[n] for n in names} for r in got.collect()]) == frozen(net(before, after))
