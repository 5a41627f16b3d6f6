"""How a snapshot read on several connections cuts its key space, and the statement each range reads with."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.key_ranges import RANGES_PER_READER, KeyRange, split_key_space
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.stages.snapshot import keyset_query


def _holds(ranges: tuple[KeyRange, ...], value: int) -> int:
    return sum((r.low is None or value >= r.low) and (r.high is None or value < r.high) for r in ranges)


@pytest.mark.parametrize(("low", "high", "readers", "chunk_rows"), [
    (1, 1_000_000, 2, 50_000), (-9_000_000_000, 9_000_000_000, 3, 200), (0, 18446744073709551615, 4, 50_000),
    (5, 105, 3, 10), (1, 7, 8, 1)])
def test_the_ranges_cover_every_key_once_in_order(low, high, readers, chunk_rows):
    ranges = split_key_space(low, high, readers, chunk_rows)
    assert 2 <= len(ranges) <= readers * RANGES_PER_READER
    assert ranges[0].low is None and ranges[-1].high is None, "open at both ends: a row outside MIN..MAX is read too"
    assert all(a.high == b.low for a, b in zip(ranges, ranges[1:])), "adjacent: no gap, no overlap"
    assert all(b.low is not None and b.high is not None and b.low < b.high for b in ranges[1:-1])
    for value in (low - 10**20, low, low + 1, (low + high) // 2, high - 1, high, high + 10**20,
                  *(r.low for r in ranges[1:]), *(r.low - 1 for r in ranges[1:])):
        assert _holds(ranges, value) == 1, value


def test_a_span_too_narrow_for_two_chunks_or_one_reader_is_one_range():
    whole = (KeyRange(low=None, high=None),)
    assert split_key_space(1, 99_999, 4, 50_000) == whole
    assert split_key_space(1, 10**9, 1, 50_000) == whole
    assert split_key_space(7, 7, 3, 1) == whole
    # Wider: as many ranges as two chunks' spans allow, up to four per reader.
    assert len(split_key_space(1, 100_000, 4, 50_000)) == 2
    assert len(split_key_space(1, 10**9, 2, 50_000)) == 2 * RANGES_PER_READER


def test_a_ranges_statement_bounds_its_first_key_column_by_arguments_before_the_keyset():
    header = RawHeader("shop.lines", (("order_no", "bigint(20)"), ("line_no", "int(11)"), ("x", "text")),
                       ("order_no", "line_no"))
    middle = KeyRange(low=-5, high=1000)
    sql = keyset_query(header, 100, True, within=middle)
    assert sql.endswith(
        "FROM `shop`.`lines` WHERE `order_no` >= %s AND `order_no` < %s AND ((`order_no` > %s) OR "
        "(`order_no` = %s AND `line_no` > %s)) ORDER BY `order_no`, `line_no` LIMIT 100"), sql
    assert middle.bounds() == [-5, 1000], "the bounds are arguments, never spelt into the statement"
    first = keyset_query(header, 100, False, within=KeyRange(low=None, high=1000))
    assert first.endswith("WHERE `order_no` < %s ORDER BY `order_no`, `line_no` LIMIT 100"), first
    assert keyset_query(header, 100, False, within=KeyRange(low=None, high=None)).endswith(
        "FROM `shop`.`lines` ORDER BY `order_no`, `line_no` LIMIT 100")
    assert "WHERE" not in keyset_query(header, 100, False)
