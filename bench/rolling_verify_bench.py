"""What the rolling verify (on by default: ``verify: slices: 24``) adds to a source's runs, and what a slice costs the
server against a whole verify: real runs of the example DAG (`airflow dags test`) on a throwaway MariaDB, with Spark
in local mode and an embedded metastore.

    .venv/bin/python bench/rolling_verify_bench.py [tables] [rows per table] [changed tables] [rounds]

The source (defaults: 24 tables of 20,000 rows) is loaded once. Then, in each of ``rounds`` rounds (default 2), the
same two runs are made with the rolling verify off (``slices: 0``, the baseline) and on (24 slices), one after
the other on the same tables: an incremental run after 1% of the rows of ``changed`` tables (default 6) changed,
and an idle run. Each run is timed as bench/source_bench.py times it; printed: the medians and the overhead of the
rolling verify per kind of run (target: at most 1.1x for an incremental run). Every Hive table is compared with
its source after the rounds, and the verify results must all be clean.

Then, on one table of ``rows`` x 50 rows, the server's side alone (``MySqlSourceHook.bucket_sums``): a whole
verify's sums against one slice's, as a set of buckets (any key) and as a range of an integer key's values, in
time and in rows read (the slice's server cost, against 1/24).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from bench.source_bench import Dag, change, check_equal, create, described, start_source  # noqa: E402

SLICES = 24


def configure(dag: Dag, slices: int) -> None:
    config = yaml.safe_load((dag.work / "cdc.yaml").read_text())
    config["verify"] = {"slices": slices}
    (dag.work / "cdc.yaml").write_text(yaml.safe_dump(config))


def verified(output: str) -> tuple[int, int]:
    """The tables the run's verify found clean, and the ones it found anything else for, from its log."""
    clean = output.count("is equal to the source")
    other = output.count("differs from the source in") + output.count("was not verified")
    return clean, other


def server_side(server, rows: int) -> None:
    import os

    from airflow_cdc_provider.core.contract import VerifySlice
    from airflow_cdc_provider.core.identifiers import TableName
    from airflow_cdc_provider.core.verify import bucket_count, key_slice, slice_buckets
    from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
    from bench.capture_bench import header_of
    from bench.source_bench import DDL, FILL
    from bench.verify_bench import READS, status

    server.execute("CREATE DATABASE big", f"CREATE TABLE big.orders ({DDL})",
                   f"INSERT INTO big.orders SELECT {FILL} FROM seq_1_to_{rows}", "ANALYZE TABLE big.orders",
                   database="many")
    user = server.create_user("slices", ("SELECT",))
    os.environ["AIRFLOW_CONN_BENCH_SLICES"] = json.dumps(server.connection_uri(user))
    hook = MySqlSourceHook("bench_slices")
    header = header_of(server, TableName("big", "orders"))
    bounds = hook.integer_key_bounds(header)
    assert bounds is not None
    kinds = {"whole": None, "buckets": VerifySlice(index=5, of=SLICES), "key range": key_slice(5, SLICES, *bounds)}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    reads: dict[str, int] = {}
    for _ in range(3):
        for kind, part in kinds.items():
            buckets = slice_buckets(rows, 1000, part) if part else bucket_count(rows, 1000)
            before = status(server)
            started = time.perf_counter()
            sums = hook.bucket_sums(header, buckets, part=part)
            times[kind].append(time.perf_counter() - started)
            reads[kind] = sum(status(server)[n] - before[n] for n in READS)
            summed = sum(s.rows for s in sums.values())
            assert (summed == rows) if part is None else (0 < summed < rows / SLICES * 1.5), summed
    whole = statistics.median(times["whole"])
    print(f"server side, one table of {rows:,} rows: whole verify's sums {whole:.2f} s, {reads['whole']:,} rows "
          "read by key", flush=True)
    for kind in ("buckets", "key range"):
        one = statistics.median(times[kind])
        print(f"    one slice of {SLICES} as {kind}: {one:.2f} s = {one / whole:.3f}x (1/{SLICES} = "
              f"{1 / SLICES:.3f}), {reads[kind]:,} rows read by key", flush=True)


def main(argv: list[str]) -> int:
    tables = int(argv[1]) if len(argv) > 1 else 24
    rows = int(argv[2]) if len(argv) > 2 else 20_000
    changed = int(argv[3]) if len(argv) > 3 else 6
    rounds = int(argv[4]) if len(argv) > 4 else 2
    work, server, _, conn_env = start_source("cdc-bench-rolling-")
    try:
        names = [f"t{n:03d}" for n in range(1, tables + 1)]
        create(server, "many", names, rows)
        source = Dag("many", [{"source": "many.*"}], conn_env, work)
        configure(source, 0)
        t_load, _ = source.run("first load")
        print(f"{tables} tables of {rows:,} rows, first load: {described(t_load)[0]}", flush=True)
        found: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        for round_ in range(rounds):
            for slices in (0, SLICES):
                configure(source, slices)
                for name in names[:changed]:  # new keys each time: the inserts' ids start past the last ones
                    change(server, f"many.{name}", rows * (2 * round_ + bool(slices) + 1))
                for kind in ("incremental", "idle"):
                    wall, output = source.run(f"{kind} {slices} {round_}")
                    text, run, tasks = described(wall)
                    found.setdefault((kind, slices), []).append((wall, run, tasks))
                    clean, other = verified(output)
                    if slices:
                        assert (clean, other) == (tables, 0), f"verify: {clean} clean, {other} not (see the log)"
                    print(f"round {round_ + 1}, {kind:11} run, slices {slices:2}: {text}; verify: {clean} clean",
                          flush=True)
        check_equal(server, source, names, "after the rounds")
        for kind in ("incremental", "idle"):
            off = [statistics.median(v[i] for v in found[(kind, 0)]) for i in range(3)]
            on = [statistics.median(v[i] for v in found[(kind, SLICES)]) for i in range(3)]
            print(f"{kind:11} run with the rolling verify / without: {on[0] / off[0]:.2f}x wall "
                  f"({on[0]:.1f} s / {off[0]:.1f} s), {on[1] / off[1]:.2f}x run, {on[2] / off[2]:.2f}x task time"
                  + ("   (target <= 1.1x)" if kind == "incremental" else ""), flush=True)
        server_side(server, rows * 50)
        print(f"each run's output is kept in {work}/many/<run>.log")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
