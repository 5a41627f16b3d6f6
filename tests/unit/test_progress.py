"""Progress lines: at most one per interval, with the rate, the share done and the time left."""

from __future__ import annotations

from airflow_cdc_provider.core.progress import Progress, binlog_offset, binlog_share, key_share


def test_a_line_at_most_every_interval_with_rate_share_and_time_left():
    now = [100.0]
    lines: list[str] = []
    progress = Progress("snapshot of shop.orders", lines.append, every=10, clock=lambda: now[0])
    now[0] = 105.0
    progress.update(500, 0.1)
    assert lines == []
    now[0] = 110.0
    progress.update(1_000, 0.25)
    now[0] = 112.0
    progress.update(1_200, 0.3)
    assert lines == ["snapshot of shop.orders: 1,000 rows in 10 s (100 rows/s), 25% done, about 30 s left"]
    now[0] = 120.0
    progress.update(2_000)
    assert lines[-1] == "snapshot of shop.orders: 2,000 rows in 20 s (100 rows/s)"
    progress.finish(4_000)
    assert lines[-1] == "snapshot of shop.orders: done, 4,000 rows in 20.0 s (200 rows/s)"


def test_shares_of_a_key_range_and_of_a_binlog_range():
    assert key_share(1, 100, 25) == 0.25 and key_share(5, 5, 5) == 1.0 and key_share(None, 9, 3) is None
    sizes = [(1, 1000), (2, 500), (3, 800)]
    assert binlog_offset((2, 100), sizes) == 1100
    assert binlog_share((1, 500), (2, 250), (3, 500), sizes) == (1250 - 500) / (2000 - 500)
    assert binlog_share((2, 4), (2, 4), (2, 4), sizes) is None
