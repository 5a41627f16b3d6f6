"""The extraction under load: four writers commit single-row changes at full speed (no pause between commits)
while binlog passes follow them, one after another, as runs scheduled back to back would.

    .venv/bin/python bench/load_bench.py [seconds] [interval]

A pass starts every ``interval`` seconds (5 by default; 0: each right after the one before), and one right after
the writers stop.

Prints the writers' rate (commits/s), the extraction's rate (records/s while a pass runs, and over the whole
time), how far behind the writers the passes were when the writers stopped, and the lag: the time from the
writers' stop until a pass has read the last commit. The server, the writers and the extraction share this
machine's cores, so the writers' rate is what this machine allows while it also extracts.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pymysql  # noqa: E402
from airflow_cdc_testing.server import ThrowawayServer  # noqa: E402
from capture_bench import Source, header_of  # noqa: E402

from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.stages.extract import extract, in_one_directory  # noqa: E402

WRITERS = 4
TABLE = TableName("bench", "load")


def writer(settings: dict, number: int, stop: threading.Event, commits: list[int]) -> None:
    """Single-row transactions without a pause: two inserts for an update and a delete of its own rows."""
    try:
        write(settings, number, stop, commits)
    except BaseException:
        stop.set()  # the bench fails: its figures would be the other writers'
        commits[number] = -1
        raise


def write(settings: dict, number: int, stop: threading.Event, commits: list[int]) -> None:
    conn = pymysql.connect(**settings, autocommit=True)
    rng = random.Random(number)
    mine: list[int] = []
    done = 0
    with conn.cursor() as cursor:
        while not stop.is_set():
            choice = rng.random()
            if choice < 0.5 or len(mine) < 10:
                cursor.execute(f"INSERT INTO {TABLE.quoted} (writer, n, note, at) VALUES (%s, %s, %s, NOW(6))",
                               (number, done, f"writer {number} row {done}"))
                mine.append(cursor.lastrowid)
            elif choice < 0.75:
                cursor.execute(f"UPDATE {TABLE.quoted} SET n = n + 1, at = NOW(6) WHERE id = %s",
                               (rng.choice(mine),))
            else:
                cursor.execute(f"DELETE FROM {TABLE.quoted} WHERE id = %s", (mine.pop(rng.randrange(len(mine))),))
            done += 1
    conn.close()
    commits[number] = done


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    work = Path(tempfile.mkdtemp(prefix="load-bench-"))
    with ThrowawayServer.start(work / "mariadb", {"max_binlog_size": 64 * 1024 * 1024}) as server:
        login = server.create_user("bench")
        server.execute("CREATE DATABASE bench",
                       f"CREATE TABLE {TABLE.quoted} (id BIGINT AUTO_INCREMENT PRIMARY KEY, writer INT NOT NULL, "
                       "n INT NOT NULL, note VARCHAR(40) NOT NULL, at DATETIME(6) NOT NULL)")
        source = Source(server, login)
        writes_as = server.create_user("writer", ("SELECT", "INSERT", "UPDATE", "DELETE"), "bench.*")
        settings = {**source.settings(), "user": writes_as.user, "password": writes_as.password}
        header = header_of(server, TABLE)
        start = source.current_watermark()
        stop, commits = threading.Event(), [0] * WRITERS
        writers = [threading.Thread(target=writer, args=(settings, n, stop, commits)) for n in range(WRITERS)]
        began = time.perf_counter()
        for thread in writers:
            thread.start()
        records = passes = 0
        busy = 0.0
        behind_at_stop = None
        stopped_at = None
        next_pass = began + interval
        while True:
            writing = time.perf_counter() - began < seconds
            if writing and time.perf_counter() < next_pass:
                time.sleep(min(0.05, next_pass - time.perf_counter()))
                continue
            next_pass = time.perf_counter() + interval
            if not writing and stopped_at is None:
                stop.set()
                for thread in writers:
                    thread.join()
                stopped_at = time.perf_counter()
                behind_at_stop = source.current_watermark()
            high = source.current_watermark()
            if high.coordinate <= start.coordinate:
                if stopped_at is not None:
                    break
                time.sleep(0.05)
                continue
            out = work / f"pass-{passes}"
            t0 = time.perf_counter()
            result = extract(source.hook, in_one_directory([header], out), start, high)
            busy += time.perf_counter() - t0
            records += sum(result.counts[str(TABLE)].values())
            passes += 1
            shutil.rmtree(out)
            if stopped_at is not None and high.coordinate >= behind_at_stop.coordinate:
                break
            start = high
        caught_up = time.perf_counter()
        if -1 in commits:
            raise SystemExit("A writer failed (above): no figures.")
        writes = sum(commits)
        print(f"{WRITERS} writers for {seconds:.0f} s: {writes:,} commits, {writes / seconds:,.0f} commits/s; "
              f"a pass every {interval:g} s")
        print(f"extraction: {records:,} records in {passes} passes; {records / busy:,.0f} records/s while a pass "
              f"ran ({busy:.1f} s busy), {records / (caught_up - began):,.0f} records/s over the whole "
              f"{caught_up - began:.1f} s; ratio to the write rate {records / busy / (writes / seconds):.2f}x")
        print(f"lag after the writers stopped: {caught_up - stopped_at:.2f} s until a pass had read the last commit")
        assert records == writes, (records, writes)


if __name__ == "__main__":
    main()
