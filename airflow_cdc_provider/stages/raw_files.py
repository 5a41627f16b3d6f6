"""Writing raw files: a header, then one record per line; complete files only appear when finished."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from airflow_cdc_provider.core.records import RawHeader, format_record
from airflow_cdc_provider.storage import make_dirs, new_file

MAX_RAW_BYTES = 256 * 1024 * 1024


class RawFileWriter:
    """Writes ``<prefix>-00001.raw``, ``-00002.raw``… in binlog order, starting a new file past ``max_bytes``,
    and at each change of the table's columns (``switch``), so that each file has one header.

    Each file is written as ``.tmp`` and renamed when closed, so a killed task leaves no file that looks whole.
    """

    def __init__(self, directory: str | os.PathLike[str], prefix: str, header: RawHeader,
                 max_bytes: int = MAX_RAW_BYTES):
        self.directory, self.prefix, self.header, self.max_bytes = Path(directory), prefix, header, max_bytes
        make_dirs(self.directory)
        self.files: list[str] = []
        # Records written per op; ``B`` (an update's before image) is counted apart: an update is one ``U``.
        self.counts = {"I": 0, "U": 0, "D": 0, "B": 0}
        self._written = 0
        self._file: TextIO = self._open()

    def _open(self) -> TextIO:
        path = self.directory / f"{self.prefix}-{len(self.files) + 1:05d}.raw"
        self._path = path
        # A killed attempt's .tmp is replaced; a raw file holds whole rows, so only this user may read it.
        self._file = new_file(path.with_suffix(".raw.tmp"), text=True, replace=True)
        self._written = self._file.write(self.header.format())
        return self._file

    def _seal(self) -> None:
        self._file.close()
        os.replace(self._path.with_suffix(".raw.tmp"), self._path)
        self.files.append(str(self._path))

    def switch(self, header: RawHeader) -> None:
        """Go on in a new file with another header: the table's columns changed at this point of the binlog."""
        self._seal()
        self.header = header
        self._open()

    def write(self, op: str, uid: str, coordinate: tuple[int, int, int], values: Sequence[Any]) -> None:
        self.write_line(op, format_record(op, uid, coordinate, values))

    def write_line(self, op: str, line: str) -> None:
        """A record already formatted (``core.records.format_record``), by a decoder process."""
        if self._written >= self.max_bytes:
            self._seal()
            self._open()
        self._written += self._file.write(line)
        self.counts[op] += 1

    def close(self) -> list[str]:
        self._seal()
        return self.files

    def abort(self) -> None:
        """Remove everything written: a failed extraction leaves no raw file behind."""
        if self._file and not self._file.closed:
            self._file.close()
        self._path.with_suffix(".raw.tmp").unlink(missing_ok=True)
        for f in self.files:
            Path(f).unlink(missing_ok=True)
