"""Threads that keep changing a test schema's orders and customers, as an application does, while runs go on.

Each thread commits small transactions: an insert, an update, a delete, a key change (``line_no`` moves), a
customer's city. Each owns its own range of order numbers, so that threads do not wait on each other's rows.
A thread that loses its server (stopped, restarted, failed over) reconnects to ``server`` as it is then; while
``server`` is None, the threads wait.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pymysql


class Writers:
    def __init__(self, server: Any, schema: str, threads: int = 1, pause: float = 0.0) -> None:
        self.server, self.schema, self.pause = server, schema, pause
        self.commits = 0
        self.errors = 0
        self._stop = threading.Event()
        self._held: set[int] = set()
        self.times: list[float] = []  # when each commit was made (epoch seconds)
        self.key_changes: dict[int, int] = {}
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True, name=f"writer-{n}")
                         for n in range(threads)]

    def __enter__(self) -> Writers:
        self.started = time.monotonic()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> float:
        """Stop the threads; returns the commits per second they made."""
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        return self.commits / max(1e-9, time.monotonic() - self.started)

    def rate(self, start: float, end: float) -> float:
        """Commits per second between two epoch times."""
        return sum(start <= t <= end for t in self.times) / max(1e-9, end - start)

    def hold(self, timeout: float = 60) -> None:
        """Stop writing until ``resume``: returns once no thread has a statement under way."""
        self.server = None
        deadline = time.monotonic() + timeout
        while len(self._held) < len(self._threads):
            assert time.monotonic() < deadline, "the writers did not stop"
            time.sleep(0.02)

    def resume(self, server: Any) -> None:
        self.server = server

    def wait_for(self, commits: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.commits < commits:
            assert time.monotonic() < deadline, f"only {self.commits} of {commits} commits in {timeout} s"
            time.sleep(0.05)

    def _run(self, n: int) -> None:
        rng = random.Random(n)
        base = 1_000_000 * (n + 1)
        mine: list[tuple[int, int]] = []  # this thread's (order_no, line_no) rows
        next_no = base
        conn = None
        while not self._stop.is_set():
            server = self.server
            if server is None:  # held: a switchover is under way
                if conn is not None:
                    conn.close()
                    conn = None
                self._held.add(n)
                time.sleep(0.02)
                continue
            self._held.discard(n)
            try:
                if conn is None:
                    conn = server.root_connection(self.schema)
                with conn.cursor() as cursor:
                    roll, changed = rng.random(), False
                    if roll < 0.45 or len(mine) < 5:
                        next_no += 1
                        cursor.execute("INSERT INTO orders (order_no, line_no, customer_id, amount, note) VALUES "
                                       "(%s, 1, 1, %s, %s)", (next_no, rng.randint(1, 99999) / 100, f"w{n}"))
                        mine.append((next_no, 1))
                    elif roll < 0.7:
                        key = rng.choice(mine)
                        cursor.execute("UPDATE orders SET amount = amount + 1, note = %s WHERE order_no = %s AND "
                                       "line_no = %s", (f"w{n} {rng.random():.6f}", *key))
                    elif roll < 0.8:
                        key = mine.pop(rng.randrange(len(mine)))
                        cursor.execute("DELETE FROM orders WHERE order_no = %s AND line_no = %s", key)
                    elif roll < 0.9:  # a key change: the old key is gone, the new one holds the row
                        changed = True
                        key = mine.pop(rng.randrange(len(mine)))
                        cursor.execute("UPDATE orders SET line_no = line_no + 1 WHERE order_no = %s AND line_no = %s",
                                       key)
                        mine.append((key[0], key[1] + 1))
                    else:
                        cursor.execute("UPDATE customers SET city = %s WHERE id = %s",
                                       (f"city {rng.randint(1, 1000)}", rng.choice((1, 2))))
                with self._lock:
                    self.commits += 1
                    self.times.append(time.time())
                    if changed:
                        self.key_changes[n] = self.key_changes.get(n, 0) + 1
            except pymysql.err.MySQLError:
                # The server went away (or a deadlock): whether the statement committed is not known, and need
                # not be, since runs are checked against the source's rows, not against this log. Its key is
                # looked up again, so that later statements hit rows.
                with self._lock:
                    self.errors += 1
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
                conn = None
                mine = self._reload(server, n) if not self._stop.is_set() else mine
                time.sleep(0.2)
                continue
            if self.pause:
                time.sleep(self.pause)
        if conn is not None:
            conn.close()

    def _reload(self, server: Any, n: int) -> list[tuple[int, int]]:
        try:
            rows = server.execute(f"SELECT order_no, line_no FROM {self.schema}.orders WHERE note LIKE 'w{n}%'")
            return [(int(a), int(b)) for a, b in rows]
        except pymysql.err.MySQLError:
            return []
