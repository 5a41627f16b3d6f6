"""Reads of the source bounded by bytes: how many rows a batch takes, and what a row is counted for."""

from __future__ import annotations

from airflow_cdc_provider.core.batches import MAX_BATCH_ROWS, MAX_ROW_BYTES, RowSize, next_batch

MB = 1024 * 1024


class Result:
    """A server-side cursor's result: ``fetchmany(n)`` gives up to n more rows; each call recorded."""

    def __init__(self, rows):
        self.rows, self.at, self.asked = rows, 0, []

    def fetchmany(self, n):
        self.asked.append(n)
        rows = self.rows[self.at : self.at + n]
        self.at += len(rows)
        return rows


def batches(result, size, budget, **kw):
    found = []
    while batch := next_batch(result.fetchmany, size, budget, **kw):
        found.append(batch)
    return found


def test_what_a_row_is_counted_for():
    size = RowSize.of([("id", "int(11)"), ("code", "char(2)"), ("label", "varchar(200)"), ("raw", "varbinary(16)"),
                       ("body", "longtext"), ("doc", "json"), ("pic", "mediumblob"), ("shape", "geometry"),
                       ("kind", "enum('a','bcd')"), ("tags", "set('x','yz')"), ("at", "datetime(6)")])
    assert size.measured == (4, 5, 6, 7)  # no bound but the server's: measured in each row
    # Bounded columns at their widest: 4 bytes a character, the longest ENUM member, every SET member.
    assert size.fixed == 16 + 4 * 2 + 4 * 200 + 16 + (4 * 3 + 1) + (4 * 1 + 1 + 4 * 2 + 1) + 16
    assert size.bytes_of([1, "eu", "x", b"", "t" * 1000, None, b"p" * 50, b"", "a", "x", None]) == size.fixed + 1050
    # No row's bounded columns exceed MySQL's row limit, however wide they are declared.
    assert RowSize.of([("a", "varchar(16000)"), ("b", "varchar(16000)")]).fixed == MAX_ROW_BYTES


def test_small_rows_are_fetched_a_whole_batch_at_a_time():
    rows = [(i, "x") for i in range(25_000)]
    result = Result(rows)
    found = batches(result, RowSize.of([("id", "int"), ("v", "varchar(10)")]), 64 * MB)
    assert [len(b) for b in found] == [MAX_BATCH_ROWS, MAX_BATCH_ROWS, 5_000]
    assert [r for b in found for r in b] == rows
    assert set(result.asked) == {MAX_BATCH_ROWS}
    # Wide rows (counted at their widest): as many as the budget holds.
    wide = Result(rows[:100])
    found = batches(wide, RowSize.of([("id", "int"), ("v", "varchar(16000)")]), 10 * MAX_ROW_BYTES)
    assert [len(b) for b in found] == [10] * 10 and set(wide.asked) == {10}
    # A budget smaller than one row still reads a row at a time.
    assert [len(b) for b in batches(Result(rows[:3]), RowSize.of([("v", "varchar(16000)")]), 100)] == [1, 1, 1]


def test_rows_with_documents_are_measured_and_a_batch_closes_at_the_budget():
    size = RowSize.of([("id", "int"), ("doc", "longblob")])
    sizes = [10, 10, 30 * MB, 10, 400_000, 400_000, 400_000, 10, 10]
    rows = [(i, b"d" * n) for i, n in enumerate(sizes)]
    result = Result(rows)
    found = batches(result, size, MB)
    # A batch holds at most the budget and one row: the huge row closes its batch.
    assert [[r[0] for r in b] for b in found] == [[0, 1, 2], [3, 4, 5, 6], [7, 8]]
    for batch in found:
        held = [size.bytes_of(r) for r in batch]
        assert sum(held[:-1]) < MB
    assert set(result.asked) == {1}, "a table with documents is fetched a row at a time"
    assert [r for b in found for r in b] == rows
    # A row over the budget that comes first is a batch of its own.
    alone = batches(Result([(0, b"d" * 2 * MB), (1, b"")]), size, MB)
    assert [[r[0] for r in b] for b in alone] == [[0], [1]]
    # Small rows of such a table still make batches of MAX_BATCH_ROWS rows.
    small = [(i, b"") for i in range(MAX_BATCH_ROWS + 1)]
    assert [len(b) for b in batches(Result(small), size, 64 * MB)] == [MAX_BATCH_ROWS, 1]


def test_an_empty_result_gives_no_batch():
    assert next_batch(Result([]).fetchmany, RowSize.of([("doc", "json")]), MB) == []
    assert next_batch(Result([]).fetchmany, RowSize.of([("id", "int")]), MB) == []
