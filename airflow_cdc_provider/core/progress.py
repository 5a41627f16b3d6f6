"""How far a long piece of work is (a snapshot, a binlog pass), said at most every few seconds.

A line names the work, the rows done, their rate, the share done and an estimate of the time left. The share
is measured in the work's own units: the key range read (a snapshot of an integer key), the rows against the
server's estimate (any other snapshot), the binlog bytes up to the high watermark (an extraction).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Progress:
    """Call ``update`` as the work goes; it calls ``log`` with a line at most every ``every`` seconds, and
    ``finish`` once with the totals."""

    what: str
    log: Callable[[str], None]
    every: float = 10.0
    unit: str = "rows"
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0, init=False)
    last: float = field(default=0.0, init=False)
    lines: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.started = self.last = self.clock()

    def update(self, done: int, share: float | None = None) -> None:
        """``done`` units so far; ``share`` the part of the whole that is done (0 to 1), when known."""
        now = self.clock()
        if now - self.last < self.every:
            return
        self.last = now
        self.lines += 1
        elapsed = max(now - self.started, 1e-9)
        line = f"{self.what}: {done:,} {self.unit} in {elapsed:.0f} s ({done / elapsed:,.0f} {self.unit}/s)"
        if share is not None:
            share = min(max(share, 0.0), 1.0)
            line += f", {share:.0%} done"
            if share > 0:
                line += f", about {elapsed * (1 - share) / share:.0f} s left"
        self.log(line)

    def finish(self, done: int) -> None:
        elapsed = max(self.clock() - self.started, 1e-9)
        self.log(f"{self.what}: done, {done:,} {self.unit} in {elapsed:.1f} s ({done / elapsed:,.0f} {self.unit}/s)")


def key_share(low: int | None, high: int | None, last: int | None) -> float | None:
    """The share of an integer key range [low, high] read up to ``last`` (a keyset read in key order)."""
    if low is None or high is None or last is None:
        return None
    return 1.0 if high <= low else (last - low + 1) / (high - low + 1)


def binlog_offset(coordinate: tuple[int, int], sizes: Sequence[tuple[int, int]]) -> int:
    """Bytes of binlog before ``coordinate`` (file sequence, position), given each file's (sequence, size)."""
    seq, position = coordinate
    return sum(size for s, size in sizes if s < seq) + position


def binlog_share(start: tuple[int, int], at: tuple[int, int], high: tuple[int, int],
                 sizes: Sequence[tuple[int, int]]) -> float | None:
    """The share of the binlog range (start, high] read up to ``at``, in bytes."""
    total = binlog_offset(high, sizes) - binlog_offset(start, sizes)
    if total <= 0:
        return None
    return (binlog_offset(at, sizes) - binlog_offset(start, sizes)) / total
