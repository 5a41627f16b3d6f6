"""The replay rule: read changes newest first; the first record seen per uid is the last effective operation
of that key and survives; every older record of the key is dropped.

This completes the seed's rule: a repeated INSERT of one key (a re-read binlog range) is dropped like any older
record, and a key change arrives from extraction as a DELETE of the old uid and an upsert of the new one. An
update's before image (``B``, for a table whose changelog has every event) is always followed by its ``U`` of the
same uid, which is seen first: a ``B`` never survives.

Blocks of raw lines are handled as arrays: op and uid sit at fixed offsets in each line, so no line is parsed
here, and the uids seen are kept as one sorted array of 32-byte values: memory grows with distinct keys only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from airflow_cdc_provider.core.records import UID_END, UID_START

_MIN_LINE = 43  # op, tab, 32-hex uid, tab, "s:p:r", tab, "[]"
_HEX_VALUE = np.full(256, -1, np.int32)
_HEX_VALUE[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16)
UID_BYTES = UID_END - UID_START


@dataclass
class Block:
    """Complete lines of a raw file, in file order: where each starts and ends, its op and uid."""

    data: bytes
    starts: np.ndarray
    ends: np.ndarray  # index of each line's newline
    ops: np.ndarray  # uint8: ord("I"), ord("U"), ord("D") or ord("B")
    uids: np.ndarray  # dtype S32

    def line(self, i: int) -> bytes:
        return self.data[self.starts[i] : self.ends[i]]


class BadLine(ValueError):
    def __init__(self, index: int, problem: str):
        super().__init__(problem)
        self.index = index


def parse_block(data: bytes) -> Block:
    """Locate the lines of ``data`` (which ends with a newline) and check their fixed fields.

    Raises BadLine with the index of the last bad line (the first met when reading backwards). The uid's
    digits are checked only for the lines that survive (``check_uids``): a damaged uid makes a key of its own,
    which then survives and is caught there.
    """
    buf = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(buf == 10)
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    ok = ends - starts >= _MIN_LINE
    if not ok.all():
        starts_checked, ends_checked = np.where(ok, starts, 0), np.where(ok, ends, _MIN_LINE)
    else:
        starts_checked, ends_checked = starts, ends
    ops = buf[starts_checked]
    ok &= (ops == 85) | (ops == 73) | (ops == 68) | (ops == 66)  # U, I, D, B
    ok &= buf[starts_checked + 1] == 9
    ok &= buf[starts_checked + UID_END] == 9
    ok &= buf[ends_checked - 1] == 93  # ]
    if not ok.all():
        bad = int(np.flatnonzero(~ok)[-1])
        line = data[starts[bad] : ends[bad]][:120]
        raise BadLine(bad, f"the line does not start with OP<tab>UID<tab> or does not end with ]: {line!r}")
    # The 32 uid bytes as four unaligned 8-byte words: four gathers instead of one per byte.
    if len(buf) < 8:
        return Block(data, starts, ends, ops, np.empty(0, dtype=f"S{UID_BYTES}"))
    words = np.ndarray(shape=(len(buf) - 7,), dtype=np.uint64, buffer=data, strides=(1,))
    first = starts_checked + UID_START
    uids = np.empty((len(starts), 4), np.uint64)
    for w in range(4):
        uids[:, w] = words[first + 8 * w]
    return Block(data, starts, ends, ops, uids.view(f"S{UID_BYTES}").ravel())


# Each coordinate's largest value: what its column in the upsert and delete files holds (int32, int64, int32).
COORDINATE_LIMITS = (2**31 - 1, 2**63 - 1, 2**31 - 1)
_LIMITS = np.array(COORDINATE_LIMITS, np.uint64)
# Coordinates joined by "/": three numbers each, of at most 19 digits (what uint64 holds whole).
_JOINED = re.compile(rb"(?:\d{1,19}:\d{1,19}:\d{1,19}/)*")


def coordinates(block: Block, indexes: np.ndarray) -> np.ndarray:
    """The ``SEQ:POS:ROW`` of the lines ``indexes`` (after the uid's tab, up to the next tab), as an (n, 3) int64
    array. Raises BadLine naming a line whose coordinate is not three decimal numbers within
    ``COORDINATE_LIMITS``. The lines' coordinates are checked and read together, one pass over their text."""
    at = _read_coordinates(block, indexes)
    if at is None:
        bad = next(i for i in reversed(indexes.tolist()) if _read_coordinates(block, np.array([i])) is None)
        raise BadLine(bad, f"the coordinate is not SEQ:POS:ROW within {COORDINATE_LIMITS}: {block.line(bad)[:200]!r}")
    return at


def _read_coordinates(block: Block, indexes: np.ndarray) -> np.ndarray | None:
    data, find = block.data, block.data.find
    fields = [data[f : find(b"\t", f, e)] for f, e in zip((block.starts[indexes] + UID_END + 1).tolist(),
                                                           block.ends[indexes].tolist())]
    joined = b"/".join([*fields, b""])
    if _JOINED.fullmatch(joined) is None:
        return None
    at = np.array(list(map(int, joined.replace(b"/", b":").split(b":")[:-1])), np.uint64).reshape(-1, 3)
    if not (at <= _LIMITS).all():
        return None
    return at.astype(np.int64)


def bad_uids(block: Block, indexes: np.ndarray) -> np.ndarray:
    """Those of ``indexes`` whose uid is not 32 lowercase hex digits."""
    digits = block.uids[indexes].view(np.uint8).reshape(-1, UID_BYTES)
    bad: np.ndarray = indexes[~(_HEX_VALUE[digits] >= 0).all(axis=1)]
    return bad


def uid_buckets(block: Block, digit: int, parts: int) -> np.ndarray:
    """For each line, a partition number in [0, parts) from the uid's hex digits [digit, digit + 4)."""
    digits = block.uids.view(np.uint8).reshape(-1, UID_BYTES)[:, digit : digit + 4]
    weighted = np.maximum(_HEX_VALUE[digits], 0) * np.array([4096, 256, 16, 1], np.int32)
    buckets: np.ndarray = weighted.sum(axis=1) % parts
    return buckets


class SeenKeys:
    """The uids already met, newest first, as one sorted array: 32 bytes per distinct key."""

    def __init__(self) -> None:
        self.keys = np.empty(0, dtype=f"S{UID_BYTES}")

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes

    def survivors(self, block: Block) -> np.ndarray:
        """Indexes (in file order) of the block's lines that survive, given all newer lines were seen before."""
        newest_first = block.uids[::-1]
        unique, first = np.unique(newest_first, return_index=True)
        pos = np.searchsorted(self.keys, unique)
        seen = pos < len(self.keys)
        seen[seen] = self.keys[pos[seen]] == unique[seen]
        new = ~seen
        self.keys = np.insert(self.keys, pos[new], unique[new])
        return np.sort(len(newest_first) - 1 - first[new])
