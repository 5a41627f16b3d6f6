import random

import numpy as np
import pytest

from airflow_cdc_provider.core import diff

H = np.uint64


def _pack_sums(sums: dict[int, int], bits: int) -> bytes:
    width = diff.id_bytes(bits)
    return b"".join(b.to_bytes(width, "big") + s.to_bytes(8, "big") for b, s in sums.items())


def test_packed_answers_read_back_bucket_by_bucket_and_row_by_row():
    rng = random.Random(1)
    for bits in (0, 1, 7, 8, 9, 17, 33, 40):
        sums = {rng.randrange(1 << bits) if bits else 0: rng.randrange(1 << 64) for _ in range(50)}
        packed = _pack_sums(sums, bits)
        cut = 20 * (diff.id_bytes(bits) + 8)  # answers come in several strings, and a NULL for no rows
        ids, values = diff.unpack_sums([packed[:cut], None, packed[cut:]], bits)
        assert dict(zip(ids.tolist(), values.tolist())) == sums, bits
    pairs = [(rng.randrange(1 << 64), rng.randrange(1 << 64)) for _ in range(20)] + [(0, (1 << 64) - 1)]
    hashes, digests = diff.unpack_pairs([b"".join(h.to_bytes(8, "big") + d.to_bytes(8, "big") for h, d in pairs)])
    assert list(zip(hashes.tolist(), digests.tolist())) == pairs


def test_an_answer_cut_short_is_refused_not_read_wrong():
    with pytest.raises(ValueError, match="not whole buckets of 10 bytes: it was cut short"):
        diff.unpack_sums([b"x" * 25], 9)
    with pytest.raises(ValueError, match="not whole rows of 16 bytes"):
        diff.unpack_pairs([b"x" * 17])


def test_the_copys_bucket_sums_are_sums_modulo_2_64_of_the_top_bits_buckets():
    rng = random.Random(2)
    hashes = [rng.randrange(1 << 64) for _ in range(3000)]
    digests = [rng.randrange(1 << 64) for _ in range(3000)]
    for bits in (0, 1, 5, 12):
        expected: dict[int, int] = {}
        for h, d in zip(hashes, digests):
            b = h >> (64 - bits) if bits else 0
            expected[b] = (expected.get(b, 0) + d) % (1 << 64)
        ids, sums = diff.local_sums(np.array(hashes, dtype=H), np.array(digests, dtype=H), bits)
        assert list(ids) == sorted(ids) and dict(zip(ids.tolist(), sums.tolist())) == expected
    ids, sums = diff.local_sums(np.array([], dtype=H), np.array([], dtype=H), 3)
    assert len(ids) == len(sums) == 0


def test_differing_buckets_and_rows_include_what_only_one_side_has():
    server = (np.array([1, 2, 3], dtype=H), np.array([10, 20, 30], dtype=H))
    local = (np.array([2, 3, 4], dtype=H), np.array([20, 31, 40], dtype=H))
    assert diff.differing(server, local).tolist() == [1, 3, 4]
    changes = diff.compare_pairs(server, local)
    assert changes.upserts.tolist() == [1, 3] and changes.deletes.tolist() == [4]


def test_the_copies_of_a_row_of_a_table_with_no_key_are_counted():
    # hash == digest: each copy of a row has the same pair. 5 goes from 2 copies to 1, 6 from 1 to 3, 7 stays at 2,
    # 8 is gone (2 copies), 9 is new.
    server = np.array([5, 6, 6, 6, 7, 7, 9], dtype=H)
    local = np.array([5, 5, 6, 7, 7, 8, 8], dtype=H)
    changes = diff.compare_pairs((server, server), (local, local))
    assert changes.upserts.tolist() == [5, 6, 9] and changes.deletes.tolist() == [8]
    assert diff.copies_changed(server, local) == (3, 3), "added: 6 twice and 9; removed: one 5 and both 8s"
    same = diff.compare_pairs((server, server), (server[::-1].copy(), server[::-1].copy()))
    assert not len(same.upserts) and not len(same.deletes), "the copies' order is no change"
    # Every copy's digest adds to its bucket's sum: one copy more or less changes the sum.
    assert diff.local_sums(server, server, 0)[1].tolist() != diff.local_sums(server[1:], server[1:], 0)[1].tolist()


def test_a_table_with_no_key_is_placed_by_its_rows_digest():
    columns = (("at", "datetime"), ("line", "text"))
    assert diff.row_hash(columns, (), True) == diff.row_digest(columns, True)
    assert diff.row_hash(columns, ("at",), True) == diff.key_hash(columns, ("at",), True)


def test_within_selects_the_rows_of_the_parent_buckets():
    hashes = np.array([0, 1 << 63, (1 << 63) + (1 << 62), (1 << 64) - 1], dtype=H)
    assert diff.within(hashes, 0, np.array([], dtype=H)).tolist() == [True] * 4
    assert diff.within(hashes, 1, np.array([1], dtype=H)).tolist() == [False, True, True, True]
    assert diff.within(hashes, 2, np.array([0, 3], dtype=H)).tolist() == [True, False, True, True]


def test_the_descent_starts_at_about_8_rows_a_bucket_and_splits_only_buckets_worth_a_scan():
    assert diff.first_bits(0) == diff.first_bits(5) == 0
    assert diff.first_bits(8 * 1024) == 10 and diff.first_bits(2_000_000) == 18
    assert diff.first_bits(10**15) == diff.MAX_BITS
    # 300 differing buckets of about 78 rows: split each into 8; of 9 rows (a first level's): read the rows' pairs.
    assert diff.refinement(300, 300 * 78, 9, 1) == 3
    assert diff.refinement(400, 400 * 9, 12, 1) == 0
    assert diff.refinement(400, 1000, 12, 2) == 0
    assert diff.refinement(0, 0, 9, 1) == 0
    assert diff.refinement(300, 300 * 78, 9, diff.MAX_LEVELS) == 0, "no more levels than MAX_LEVELS"
    assert diff.refinement(10, 10**9, diff.MAX_BITS - 2, 1) == 2, "no more bits than MAX_BITS"


def test_statements_bind_every_parent_and_hash_and_double_a_names_percent():
    hash_sql, digest_sql = diff.key_hash((("i%d", "int"),), ("i%d",), True), diff.row_digest((("i%d", "int"),), True)
    (first,) = diff.sums_statements("`s`.`t`", hash_sql, digest_sql, 9)
    assert "`i%%d`" in first.sql and first.args == () and " IN " not in first.sql
    assert first.sql.count("%s") == 0 and "GROUP BY b >>" not in first.sql, "512 buckets: one answer"
    parents = list(range(diff.MAX_PARENTS + 5))
    statements = diff.sums_statements("`s`.`t`", hash_sql, digest_sql, 20, 17, parents, buckets=8 * len(parents))
    assert [len(s.args) for s in statements] == [diff.MAX_PARENTS, 5]
    assert all(s.sql.count("%s") == len(s.args) for s in statements)
    assert "GROUP BY b >> 16" in statements[0].sql, "about 400,000 buckets: 16 answers of 25,000"
    (pairs,) = diff.pairs_statements("`s`.`t`", hash_sql, digest_sql, 12, [3, 9], rows=100)
    assert pairs.args == (3, 9) and pairs.sql.count("%s") == 2 and "GROUP BY h" not in pairs.sql
    (rows,) = diff.rows_statements("`s`.`t`", ["`i%d`"], hash_sql, [2**64 - 1, 5])
    assert rows.args == (2**64 - 1, 5) and rows.sql.count("%s") == 2 and "`i%%d`" in rows.sql


def test_a_json_value_counts_by_its_text_on_mysql_too():
    columns = (("id", "int"), ("doc", "json"))
    assert "CAST(`doc` AS CHAR)" in diff.row_digest(columns, mariadb=False)
    assert "JSON_NORMALIZE(`doc`)" in diff.row_digest(columns, mariadb=True)
