"""A capture of one table in a process of its own, reporting each stage's peak memory: run by test_capture's
large-row test, so that a peak is the capture's alone and not what the test session holds.

``python -m tests.integration.large_row_capture '<json>'`` with conn, table, out, socket (the server's, for the
root session that changes the row between the snapshot and the extraction), update and read_buffer; prints one
JSON line: each stage's peak (bytes above the process's size before it), and what the files hold.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pymysql

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.types import arrow_table, file_schema
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, in_one_directory
from airflow_cdc_provider.stages.replay import replay
from airflow_cdc_provider.stages.snapshot import snapshot


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


SECONDS: dict[str, float] = {}


def measured(work: Callable[[], Any], stage: str) -> tuple[Any, int]:
    """``work()`` and the peak resident memory it added (bytes above the size before it); its time in SECONDS."""
    # What earlier work freed goes back to the system first, so that reusing it cannot hide this work's peak.
    gc.collect()
    pa.default_memory_pool().release_unused()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from the size now (Linux 4.0 and later)
    started = time.monotonic()
    result = work()
    SECONDS[stage] = round(time.monotonic() - started, 2)
    return result, _status("VmHWM") - before


def digests(files: list[str]) -> dict[int, list[Any]]:
    """Each row's id → [length, SHA-256] of its body, read a row group at a time."""
    found = {}
    for name in files:
        parquet = pq.ParquetFile(name)
        for i in range(parquet.num_row_groups):
            for row in parquet.read_row_group(i).to_pylist():
                found[row["id"]] = [len(row["body"]), hashlib.sha256(row["body"]).hexdigest()]
    return found


def main(args: dict[str, Any]) -> dict[str, Any]:
    out = Path(args["out"])
    hook = MySqlSourceHook(args["conn"])
    header = hook.raw_header(TableName.parse(args["table"]))
    # pyarrow imports pandas on its first conversion: the process's start, not a stage's memory.
    arrow_table([], file_schema(header))
    snap, snapshot_peak = measured(lambda: snapshot(hook, header, out / "snap", read_buffer=args["read_buffer"]),
                                     "snapshot")
    started = time.monotonic()
    root = pymysql.connect(unix_socket=args["socket"], user="root", autocommit=True)
    try:
        with root.cursor() as cursor:
            cursor.execute(args["update"])  # the new value is made by the server: nothing of it passes here
    finally:
        root.close()
    SECONDS["update"] = round(time.monotonic() - started, 2)
    high = hook.current_watermark()
    extracted, extract_peak = measured(lambda: extract(hook, in_one_directory([header], out / "raw"), snap.watermark, high).check(),
                                      "extract")
    replayed, replay_peak = measured(lambda: replay(extracted.files[header.table], out / "u.parquet",
                                                    out / "d.parquet"), "replay")
    return {
        "peaks": {"snapshot": snapshot_peak, "extract": extract_peak, "replay": replay_peak},
        "seconds": SECONDS,
        "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "row_groups": [pq.ParquetFile(f).metadata.row_group(i).num_rows for f in snap.files
                       for i in range(pq.ParquetFile(f).num_row_groups)],
        "snapshot": digests(snap.files),
        "counts": extracted.counts[header.table],
        "upserts": digests([replayed.upsert_file]),
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
