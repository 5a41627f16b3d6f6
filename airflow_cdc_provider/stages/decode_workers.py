"""Row events decoded in processes of their own, beside the binlog pass that reads them (``stages.extract``).

The pass reads the binlog once, on its one replication connection, and follows each table's columns as now. The
bytes of the row events that ``core.row_images`` decodes go, in batches, to decoder processes, which decode,
normalise, key and format them as the raw files' lines (``core.records``); the pass writes the lines it gets back
in the order it read the events, so the raw files are the same bytes as a pass that decodes in one process.
Anything else (an event the reader must decode, a partitioned table's, whose partitions the pass notes) is
decoded by the pass itself, once what is pending for its table is written.

- The decoders are started as ``python -m airflow_cdc_provider.stages.decode_workers``, not forked (the task has
  threads; a fork copies the locks they hold). They import the core only, and die with the task
  (``PR_SET_PDEATHSIG``) or when their pipe closes.
- A batch and its lines travel as pickles over pipes between the task and the processes it started.
- At most ``IN_FLIGHT`` batches per decoder are pending: the memory held is bounded whatever the range holds. A
  thread per decoder takes its answers as they come, so neither side waits on a full pipe.
- A value a decoder cannot read is answered as such and fails its table with the message the pass gives
  (``_TableSink``); a decoder that dies fails the pass, and the task's retry reads the range again.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from airflow_cdc_provider.core.records import format_record, key_uid
from airflow_cdc_provider.core.row_images import BinlogColumn, RowImageDecoder, UndecodableValue, plan_decoder
from airflow_cdc_provider.core.values import Normaliser, binlog_normaliser, normalise_rows
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.helper_processes import die_with_parent, end, how_it_ended

IN_FLIGHT = 2  # batches pending per decoder
BATCH_BYTES = 1 << 20  # event bytes per batch, about
BATCH_EVENTS = 2000

UPDATE, INSERT, DELETE = "U", "I", "D"


@dataclass(frozen=True)
class DecodePlan:
    """What a decoder needs to turn a table's row events into lines: the columns' decoding, their types (the
    normalisers), the key's place, and whether updates write their before images."""

    columns: tuple[BinlogColumn, ...]
    types: tuple[str, ...]
    key_indexes: tuple[int, ...]
    before_images: bool


def records_of(kind: str, images: list[list[Any]], key_indexes: Sequence[int], before_images: bool,
               seq: int, pos: int) -> Iterator[tuple[str, str, tuple[int, int, int], list[Any]]]:
    """The raw records of a row event's images (an update's before and after images in turn): op, uid,
    coordinate, values. An update that changes the key deletes the old key."""
    if kind == UPDATE:
        for n, (before, after) in enumerate(zip(images[::2], images[1::2])):
            old_uid, new_uid = key_uid([before[i] for i in key_indexes]), key_uid([after[i] for i in key_indexes])
            if old_uid != new_uid:
                yield "D", old_uid, (seq, pos, n), before
            elif before_images:
                yield "B", old_uid, (seq, pos, n), before
            yield "U", new_uid, (seq, pos, n), after
    else:
        for n, image in enumerate(images):
            yield kind, key_uid([image[i] for i in key_indexes]), (seq, pos, n), image


# An item of a batch: (its table's sink number, plan number, kind, event bytes, binlog file, end position).
Item = tuple[int, int, str, bytes, int, int]
# An answer per item: ("lines", [(op, line)…]), ("undecodable", column index, message) or ("misfit", message).
Answer = tuple[Any, ...]


class _Planned:
    def __init__(self, plan: DecodePlan) -> None:
        decoder = plan_decoder(list(plan.columns))
        if decoder is None:
            raise ValueError("a decode plan without a decoder")
        self.decoder: RowImageDecoder = decoder
        self.normalisers: list[tuple[int, Normaliser]] = [
            (i, f) for i, ctype in enumerate(plan.types) if (f := binlog_normaliser(ctype))]
        self.key_indexes, self.before_images = plan.key_indexes, plan.before_images


def decode(planned: _Planned, kind: str, body: bytes, seq: int, pos: int) -> Answer:
    try:
        images = planned.decoder.images(body)
    except UndecodableValue as exc:
        return ("undecodable", exc.index, str(exc.error))
    except ValueError as exc:
        return ("misfit", str(exc))
    if planned.normalisers:
        normalise_rows(images, planned.normalisers)
    return ("lines", [(op, format_record(op, uid, coordinate, values)) for op, uid, coordinate, values
                      in records_of(kind, images, planned.key_indexes, planned.before_images, seq, pos)])


class _Decoder:
    """One decoder process, and the thread that takes its answers."""

    def __init__(self, number: int) -> None:
        orders_read, orders_write = os.pipe()
        answers_read, answers_write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(orders_read), str(answers_write), str(os.getpid())],
            pass_fds=(orders_read, answers_write), stdin=subprocess.DEVNULL, stdout=2, close_fds=True)
        os.close(orders_read)
        os.close(answers_write)
        self.orders = Connection(orders_write, readable=False)
        self.answers_pipe = Connection(answers_read, writable=False)
        self.answers: queue.Queue[Any] = queue.Queue()
        self.plans: set[int] = set()
        self.taker = threading.Thread(target=self._take, name=f"decoder-{number}-answers", daemon=True)
        self.taker.start()

    def _take(self) -> None:
        try:
            while True:
                self.answers.put(self.answers_pipe.recv())
        except (EOFError, OSError):
            self.answers.put(None)

    def died(self) -> RuntimeError:
        return RuntimeError(f"A decoder process of the binlog pass {how_it_ended(self.process)} (its output is in "
                            "the task's log). Nothing of this range was handed on; the task's retry reads it again.")

    def close(self, kill: bool) -> None:
        try:
            self.orders.close()
        except OSError:
            pass
        end(self.process, kill)
        self.taker.join(timeout=10)
        self.answers_pipe.close()


class DecodeWorkers:
    """Decoder processes fed in turn; answers handed back in the order the batches were sent (``drain``,
    ``add``'s ``write``)."""

    def __init__(self, processes: int, write: Callable[[Sequence[Item], Sequence[Answer]], None]) -> None:
        self.write = write
        self.decoders = [_Decoder(n) for n in range(processes)]
        self.turn = 0
        self.plans: dict[DecodePlan, int] = {}  # each plan's number: its index in ``numbered``
        self.numbered: list[DecodePlan] = []
        self.batch: list[Item] = []
        self.batch_bytes = 0
        self.sent: deque[tuple[_Decoder, list[Item]]] = deque()
        self.pending_sinks: set[int] = set()

    def plan(self, plan: DecodePlan) -> int:
        number = self.plans.get(plan)
        if number is None:
            number = self.plans[plan] = len(self.numbered)
            self.numbered.append(plan)
        return number

    def add(self, sink: int, plan: int, kind: str, body: bytes, seq: int, pos: int) -> None:
        self.batch.append((sink, plan, kind, body, seq, pos))
        self.pending_sinks.add(sink)
        self.batch_bytes += len(body)
        if self.batch_bytes >= BATCH_BYTES or len(self.batch) >= BATCH_EVENTS:
            self._send()

    def _send(self) -> None:
        if not self.batch:
            return
        decoder = self.decoders[self.turn]
        self.turn = (self.turn + 1) % len(self.decoders)
        while sum(1 for d, _ in self.sent if d is decoder) >= IN_FLIGHT:
            self._write_oldest()
        new = {n: self.numbered[n] for n in {item[1] for item in self.batch} - decoder.plans}
        try:
            decoder.orders.send((new, self.batch))
        except OSError:
            raise decoder.died() from None
        decoder.plans |= new.keys()
        self.sent.append((decoder, self.batch))
        self.batch, self.batch_bytes = [], 0

    def _write_oldest(self) -> None:
        decoder, items = self.sent.popleft()
        answers = decoder.answers.get()
        if answers is None:
            raise decoder.died()
        self.write(items, answers)

    def drain(self) -> None:
        """Every event added so far decoded and written."""
        self._send()
        while self.sent:
            self._write_oldest()
        self.pending_sinks.clear()

    def close(self, failed: bool = False) -> None:
        for decoder in self.decoders:
            decoder.close(kill=failed)


def main(orders_fd: int, answers_fd: int, parent: int) -> None:
    die_with_parent(parent)
    orders, answers = Connection(orders_fd, writable=False), Connection(answers_fd, readable=False)
    planned: dict[int, _Planned] = {}
    while True:
        try:
            new, batch = orders.recv()
        except EOFError:
            return
        for number, plan in new.items():
            planned[number] = _Planned(plan)
        failpoint("extract.decode")
        answers.send([decode(planned[plan], kind, body, seq, pos) for _, plan, kind, body, seq, pos in batch])


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
