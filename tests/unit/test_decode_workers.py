"""Decoder processes (``stages.decode_workers``): answers in the order the events were added, whatever process
decoded them; a value they cannot read answered as such; a decoder that dies fails the pass."""

from __future__ import annotations

import os
import signal
import struct

import pytest

from airflow_cdc_provider.core.binlog_columns import LONG, VARCHAR
from airflow_cdc_provider.core.records import format_record, key_uid
from airflow_cdc_provider.core.row_images import BinlogColumn
from airflow_cdc_provider.stages import decode_workers
from airflow_cdc_provider.stages.decode_workers import DELETE, INSERT, UPDATE, DecodePlan, DecodeWorkers, records_of

PLAN = DecodePlan((BinlogColumn(LONG), BinlogColumn(VARCHAR, max_length=40, charset="utf8mb4")),
                  ("int(11)", "varchar(10)"), (0,), False)


def _row(key: int, text: bytes) -> bytes:
    return b"\x00" + struct.pack("<i", key) + bytes([len(text)]) + text


def test_the_records_of_an_update_that_changes_its_key_or_keeps_it():
    before, after, moved = [1, "a"], [1, "b"], [2, "b"]
    assert [r[:3] for r in records_of(UPDATE, [before, after, before, moved], (0,), False, 3, 400)] == [
        ("U", key_uid([1]), (3, 400, 0)), ("D", key_uid([1]), (3, 400, 1)), ("U", key_uid([2]), (3, 400, 1))]
    assert [r[0] for r in records_of(UPDATE, [before, after], (0,), True, 3, 400)] == ["B", "U"]
    assert [r[:3] for r in records_of(DELETE, [before, moved], (0,), False, 1, 9)] == [
        ("D", key_uid([1]), (1, 9, 0)), ("D", key_uid([2]), (1, 9, 1))]


def test_answers_come_back_in_the_order_added_across_processes_and_batches(monkeypatch):
    monkeypatch.setattr(decode_workers, "BATCH_EVENTS", 7)  # many batches, sent to the two processes in turn
    written: list[tuple[int, object]] = []
    workers = DecodeWorkers(2, lambda items, answers: written.extend(
        (item[0], answer) for item, answer in zip(items, answers)))
    try:
        plan = workers.plan(PLAN)
        assert workers.plan(PLAN) == plan, "a plan is sent once, known by its number"
        expected = []
        for n in range(100):
            body = _row(n, f"é{n}".encode()) + _row(n + 1000, b"x")
            workers.add(n % 3, plan, INSERT, body, 1, 100 + n)
            expected.append((n % 3, ("lines", [
                ("I", format_record("I", key_uid([n]), (1, 100 + n, 0), [n, f"é{n}"])),
                ("I", format_record("I", key_uid([n + 1000]), (1, 100 + n, 1), [n + 1000, "x"]))])))
        workers.add(5, plan, INSERT, _row(7, b"\xff"), 2, 4)  # not UTF-8: the column and the decoder's error
        workers.add(6, plan, INSERT, b"\x00\x01", 2, 8)  # too short for its table map
        assert workers.pending_sinks == {0, 1, 2, 5, 6}
        workers.drain()
        assert not workers.pending_sinks and not workers.sent
        assert written[:100] == expected
        (sink, undecodable), (_, misfit) = written[100:]
        assert sink == 5 and undecodable[:2] == ("undecodable", 1) and "ff" in undecodable[2]
        assert misfit[0] == "misfit"
    finally:
        workers.close()


def test_a_decoder_that_dies_fails_the_pass():
    workers = DecodeWorkers(1, lambda items, answers: None)
    try:
        os.kill(workers.decoders[0].process.pid, signal.SIGKILL)
        workers.add(0, workers.plan(PLAN), INSERT, _row(1, b"a"), 1, 4)
        with pytest.raises(RuntimeError, match="decoder process of the binlog pass was killed by signal 9"):
            workers.drain()
    finally:
        workers.close(failed=True)
