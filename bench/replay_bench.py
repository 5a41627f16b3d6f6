"""Replay speed: raw records/s on a narrow table, with peak memory. Target: >= 1.5 M records/s.

    .venv/bin/python bench/replay_bench.py [records] [distinct_keys] [positions]

Writes a raw file of `records` changes over `distinct_keys` keys (a narrow table: id, name, amount, updated_at),
then replays it and prints records/s and the peak resident memory of the replay, beside a baseline measured in
the same run: the raw file read alone, a block at a time, its lines counted (what no replay can beat). A third
argument `positions` replays as for a table with a changelog (each key's binlog coordinate kept).
"""

from __future__ import annotations

import datetime as dt
import random
import resource
import shutil
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_cdc_provider.core.records import RawHeader, format_record, key_uid  # noqa: E402
from airflow_cdc_provider.stages.replay import replay  # noqa: E402

HEADER = RawHeader(
    "bench.narrow",
    (("id", "bigint(20)"), ("name", "varchar(40)"), ("amount", "decimal(12,2)"), ("updated_at", "datetime(3)")),
    ("id",),
)


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 3_000_000
    keys = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    positions = len(sys.argv) > 3 and sys.argv[3] == "positions"
    work = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    try:
        run(work, records, keys, positions)
    finally:
        shutil.rmtree(work)  # the raw file alone is 340 MB at the default size


def run(work: Path, records: int, keys: int, positions: bool) -> None:
    rng = random.Random(7)
    raw = work / "raw"
    uids = {}
    t0 = time.perf_counter()
    with open(raw, "w") as f:
        f.write(HEADER.format())
        base = dt.datetime(2026, 1, 1)
        for n in range(records):
            k = rng.randrange(keys)
            uid = uids.get(k) or uids.setdefault(k, key_uid([k]))
            op = "D" if n % 50 == 0 else "U"
            f.write(format_record(op, uid, (1, 4 + n * 90, 0), [k, f"name {k}", Decimal(n % 100000) / 100, base]))
    size = raw.stat().st_size
    print(f"wrote {records:,} raw records over {keys:,} keys ({size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    lines = 0
    with open(raw, "rb") as f:
        while block := f.read(1 << 24):
            lines += block.count(b"\n")
    baseline = time.perf_counter() - t0
    print(f"baseline, the raw file read alone: {(lines - 1) / baseline / 1e6:.2f} M raw records/s ({baseline:.2f} s)")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    result = replay([raw], work / "upsert.parquet", work / "delete.parquet", positions=positions)
    seconds = time.perf_counter() - t0
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"replay{' with positions' if positions else ''}: {records / seconds / 1e6:.2f} M raw records/s "
          f"({seconds:.2f} s); "
          f"{result.upserts:,} upserts, {result.deletes:,} deletes; "
          f"peak RSS {rss_after / 1024:.0f} MiB (before replay {rss_before / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
