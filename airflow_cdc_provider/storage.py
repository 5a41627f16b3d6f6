"""Where run files, ledgers and locks live: a disk the workers share, or an object store.

The work directory (``work_dir``) is a local path, a ``file://`` URI or an ``s3://`` URI. Every Python stage
reaches it through one ``WorkStore`` over an fsspec filesystem; the merge job on Spark reaches the same files
through Hadoop's FileSystem, by the URIs ``WorkStore.uri`` gives.

The ledger's lock needs two atomic operations, and each accepted scheme has them:

- create-if-absent: on a disk, ``os.link`` of a written file (fails if the name exists); on S3, PutObject with
  ``If-None-Match: *``;
- compare-and-swap, to take over the lock of a run that is gone: on a disk, under an exclusive ``flock`` of a
  guard file beside the lock (NFS v4 carries it to the server), the lock is read, compared and replaced by one
  rename, so it is never absent; on S3, PutObject with ``If-Match: <the ETag read>``.

Other schemes (``hdfs://``, ``gs://``, ``abfs://``…) are refused: their lock could not be tested here.
Stages write each file whole: locally in place, on an object store into a local scratch directory uploaded
when the stage's table is done (``staging``); the replay downloads the raw files first (``fetched``).

On a disk the work state is this user's alone, whatever the umask of the process that writes it: directories are
made with mode 0700, files created exclusively with mode 0600 without following a link planted at their name
(``new_file``), and a work directory that another user owns or can write is refused (``check_dir``), as is a
document of the work state that is not ours. An object store has no modes: its bucket's policy protects it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal, TextIO, overload

from airflow_cdc_provider.core.errors import WorkDirFull
from airflow_cdc_provider.core.model import M, Model
from airflow_cdc_provider.core.workdir import (  # noqa: F401  (the names storage has always offered)
    LOCAL_SCHEMES,
    OBJECT_SCHEMES,
    SCHEMES,
    StorageError,
    UnsafeWorkDir,
    access_problem,
    check_work_dir,
    join,
    scheme_of,
)
from airflow_cdc_provider.core.workdir import local_path as _local


class WorkStore:
    """Files of the work directory by location (a path or a URI under ``work_dir``).

    :param fs: the fsspec filesystem of the locations' scheme (``None``: the local disk).
    :param root: on the local disk, the directory the store was opened on (``hooks.work_store``): it and every
        directory under it that a write goes through must be this user's alone (``check_dir``).
    """

    def __init__(self, fs: Any = None, root: str | None = None) -> None:
        self.fs = fs
        self.root = Path(_local(root)) if root is not None and fs is None else None

    def open_root(self) -> WorkStore:
        """Make the root directory if it is missing (mode 0700) and refuse it if another user could write it."""
        if self.root is not None:
            make_dirs(self.root)
            check_dir(self.root)
        return self

    def _make_dirs(self, path: Path) -> None:
        """``path``'s missing directories made (0700), and each level under the root checked as ``check_dir``."""
        make_dirs(path)
        if self.root is None:
            return
        try:
            below = path.relative_to(self.root)
        except ValueError:
            return  # outside the directory the store was opened on: only made, as without a root
        level = self.root
        for part in below.parts:
            level = level / part
            check_dir(level, follow=False)

    @property
    def is_local(self) -> bool:
        return self.fs is None

    # Locations

    def _key(self, location: str) -> str:
        """The name the filesystem knows ``location`` by."""
        if self.is_local:
            return _local(location)
        return str(self.fs._strip_protocol(location))

    def uri(self, location: str) -> str:
        """What Spark reads ``location`` by: a local path as a ``file://`` URI, so that a cluster whose default
        filesystem is HDFS still finds it on the shared disk."""
        if self.is_local:
            return Path(_local(location)).absolute().as_uri()
        return location

    # Whole files

    def read_text(self, location: str) -> str | None:
        if self.is_local:
            try:
                with _open_own(self._key(location), os.O_RDONLY) as file:
                    return file.read().decode()
            except FileNotFoundError:
                return None
        try:
            return bytes(self.fs.cat_file(self._key(location))).decode()
        except FileNotFoundError:
            return None

    def write_text(self, location: str, text: str) -> None:
        """Replace the file whole: readers see the old text or the new one."""
        if self.is_local:
            path = Path(self._key(location))
            self._make_dirs(path.parent)
            os.replace(_written_beside(path, text), path)  # a rename replaces a link at the name, never its target
        else:
            self.fs.pipe_file(self._key(location), text.encode())  # a PUT is atomic

    def create_text(self, location: str, text: str) -> bool:
        """Write the file only if there is none; whether it was written. Atomic (see the module's notes)."""
        if self.is_local:
            path = Path(self._key(location))
            self._make_dirs(path.parent)
            tmp = _written_beside(path, text)
            try:
                os.link(tmp, path)  # fails on any name there, a link included
                return True
            except FileExistsError:
                return False
            finally:
                tmp.unlink(missing_ok=True)
        bucket, key = self._bucket_key(location)
        try:
            _call(self.fs, "put_object", Bucket=bucket, Key=key, Body=text.encode(), IfNoneMatch="*")
        except (FileExistsError, OSError) as exc:
            if self._precondition_failed(exc):
                return False
            raise
        finally:
            self.fs.invalidate_cache(self._key(location))
        return True

    def swap_text(self, location: str, expected: str, text: str) -> bool:
        """Replace the file by ``text`` only if it holds ``expected`` now; whether it was replaced. Atomic."""
        if self.is_local:
            path = Path(self._key(location))
            # The file is replaced in one rename, so it is never absent (a create-if-absent cannot slip in), under
            # an exclusive lock of a guard file beside it, so that of two swappers only the first finds what it
            # read. The kernel drops the guard's lock with its process: a killed swapper blocks nobody.
            guard = path.with_name(f".{path.name}.guard")
            with own_file(str(guard)) as held_guard:
                fcntl.flock(held_guard, fcntl.LOCK_EX)
                held = self.read_text(location)
                if held is None:
                    return False
                if held != expected:
                    return False
                os.replace(_written_beside(path, text), path)
                return True
        bucket, key = self._bucket_key(location)
        try:
            held, etag = _get_object(self.fs, bucket, key)
        except FileNotFoundError:
            return False
        if held != expected:
            return False
        try:
            _call(self.fs, "put_object", Bucket=bucket, Key=key, Body=text.encode(), IfMatch=etag)
        except OSError as exc:
            if self._precondition_failed(exc) or isinstance(exc, FileNotFoundError):
                return False
            raise
        finally:
            self.fs.invalidate_cache(self._key(location))
        return True

    def delete(self, location: str) -> None:
        if self.is_local:
            Path(self._key(location)).unlink(missing_ok=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._key(location))

    def exists(self, location: str) -> bool:
        if self.is_local:
            return Path(self._key(location)).exists()
        return bool(self.fs.exists(self._key(location)))

    # Documents: the typed values of ``core`` (``core.model.Model``), one file each

    def read(self, location: str, model: type[M]) -> M | None:
        """The document at ``location`` as a ``model``, or None when there is none."""
        text = self.read_text(location)
        return model.from_text(text) if text else None

    def write(self, location: str, value: Model) -> None:
        """Replace the document at ``location`` whole."""
        self.write_text(location, value.to_text())

    # Directories

    def subdirectories(self, location: str) -> list[tuple[str, float]]:
        """Each directory under ``location``: its name and when it was last written (newest first)."""
        if self.is_local:
            root = Path(self._key(location))
            if not root.is_dir():
                return []
            found = [(p.name, p.stat().st_mtime) for p in root.iterdir() if p.is_dir()]
        else:
            found = []
            with contextlib.suppress(FileNotFoundError):
                for entry in self.fs.ls(self._key(location), detail=True, refresh=True):
                    if entry["type"] == "directory":
                        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
                        found.append((name, self._newest(entry["name"])))
        return sorted(found, key=lambda item: item[1], reverse=True)

    def file_names(self, location: str) -> list[str]:
        """The names of the files directly under ``location`` (none when it does not exist)."""
        if self.is_local:
            root = Path(self._key(location))
            return sorted(p.name for p in root.iterdir() if p.is_file()) if root.is_dir() else []
        with contextlib.suppress(FileNotFoundError):
            return sorted(entry["name"].rsplit("/", 1)[-1]
                          for entry in self.fs.ls(self._key(location), detail=True, refresh=True)
                          if entry["type"] == "file")
        return []

    def _newest(self, key: str) -> float:
        times = [info["LastModified"].timestamp() for info in self.fs.find(key, detail=True).values()
                 if info.get("LastModified") is not None]
        return max(times, default=0.0)

    def remove_tree(self, location: str) -> None:
        if self.is_local:
            shutil.rmtree(self._key(location), ignore_errors=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._key(location), recursive=True)

    @contextlib.contextmanager
    def staging(self, location: str) -> Iterator[Path]:
        """A local directory to write ``location``'s files in. Locally it is ``location`` itself; on an object
        store a scratch directory, uploaded when the block ends without an error (a failed stage uploads
        nothing, and its retry starts over)."""
        if self.is_local:
            path = Path(self._key(location))
            self._make_dirs(path)
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="cdc-stage-") as scratch:
            yield Path(scratch)
            for file in sorted(p for p in Path(scratch).rglob("*") if p.is_file()):
                self.fs.put_file(str(file), self._key(join(location, file.relative_to(scratch).as_posix())))

    def location_of(self, staged: Path | str, staging_dir: Path, location: str) -> str:
        """The location a file written in ``staging(location)`` is found at after the upload."""
        return join(location, Path(staged).relative_to(staging_dir).as_posix())

    @contextlib.contextmanager
    def fetched(self, locations: Sequence[str]) -> Iterator[list[Path]]:
        """Local copies of the files at ``locations``, in order (the files themselves on a local disk)."""
        if self.is_local:
            yield [Path(self._key(location)) for location in locations]
            return
        with tempfile.TemporaryDirectory(prefix="cdc-fetch-") as scratch:
            local = []
            for n, location in enumerate(locations):
                target = Path(scratch) / f"{n:06d}-{location.rsplit('/', 1)[-1]}"
                self.fs.get_file(self._key(location), str(target))
                local.append(target)
            yield local

    # S3 details

    def _bucket_key(self, location: str) -> tuple[str, str]:
        bucket, _, key = self._key(location).partition("/")
        return bucket, key

    @staticmethod
    def _precondition_failed(exc: BaseException) -> bool:
        # s3fs turns HTTP 412 into FileExistsError (If-None-Match) or an OSError holding PreconditionFailed.
        if isinstance(exc, FileExistsError):
            return True
        text = f"{exc} {exc.__cause__ or ''}"
        return "PreconditionFailed" in text or "412" in text or "At least one of the pre-conditions" in text


def _written_beside(path: Path, text: str) -> Path:
    """``text`` in a new file of a unique name beside ``path``, to be renamed or linked into place."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with new_file(tmp) as file:
        file.write(text.encode())
    return tmp


# Local files of the work state -------------------------------------------------------------------------------

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def make_dirs(path: str | os.PathLike[str]) -> None:
    """Make ``path`` and its missing parents with mode 0700 (the umask can only narrow it)."""
    missing = []
    level = Path(path)
    while not os.path.lexists(level) and level != level.parent:
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another worker made it first: check_dir judges it
            os.mkdir(directory, 0o700)


def check_dir(path: str | os.PathLike[str], follow: bool = True) -> None:
    """Refuse (``UnsafeWorkDir``) a directory of the work state that another user owns or can write, or, with
    ``follow`` false, a link in place of the directory. One stat."""
    try:
        found = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        raise UnsafeWorkDir(f"The directory {path} of the work state vanished while it was used: another process "
                            "removed it. Check who else uses the work directory; run the task again.") from None
    if not stat.S_ISDIR(found.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(found.st_mode) else "not a directory"
        raise UnsafeWorkDir(f"{path} is {what}, where the work state keeps a directory of its own: another user may "
                            "have planted it. Remove it, check who can write the work directory, and run the task "
                            "again.")
    problem = access_problem(str(path), found.st_mode, found.st_uid, os.geteuid())
    if problem:
        raise UnsafeWorkDir(problem)


@overload
def new_file(path: str | os.PathLike[str], text: Literal[False] = ..., replace: bool = ...) -> BinaryIO: ...
@overload
def new_file(path: str | os.PathLike[str], text: Literal[True], replace: bool = ...) -> TextIO: ...
def new_file(path: str | os.PathLike[str], text: bool = False, replace: bool = False) -> IO[Any]:
    """A file created for writing with mode 0600, only if nothing is at its name: never through a link planted
    there, nor into a file someone else opened first. ``replace``: a file or link left at the name (a killed
    attempt's) is removed first; the creation still fails if one appears again in between."""
    if replace:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a link itself, not what it points at
    fd = os.open(path, _NEW_FILE, 0o600)
    if text:
        return os.fdopen(fd, "w", encoding="utf-8", newline="\n")
    return os.fdopen(fd, "wb")


def own_file(path: str) -> contextlib.AbstractContextManager[IO[bytes]]:
    """A file of the work state or the warehouse held open for a ``flock``: created (0600) if missing, refused
    when another user owns it or can write it, never followed through a link."""
    return _open_own(path, os.O_RDWR | os.O_CREAT)


@contextlib.contextmanager
def _open_own(path: str, flags: int) -> Iterator[IO[bytes]]:
    """A file of the work state opened without following a link, refused (``UnsafeWorkDir``) when it is not ours
    or another user can write it: a planted lock or ledger would decide what the runs do."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UnsafeWorkDir(f"{path} is a symbolic link, where the work state keeps a file of its own: another user "
                            "may have planted it. Remove it, check who can write the work directory, and run the "
                            "task again.") from None
    file = os.fdopen(fd, "r+b" if flags & os.O_RDWR else "rb")
    try:
        found = os.fstat(fd)
        problem = access_problem(path, found.st_mode, found.st_uid, os.geteuid(), directory=False)
        if problem:
            raise UnsafeWorkDir(problem)
        yield file
    finally:
        file.close()


def _call(fs: Any, method: str, **kwargs: Any) -> Any:
    """One S3 call through the filesystem's client (its credentials, endpoint and retries)."""
    from fsspec.asyn import sync

    return sync(fs.loop, fs._call_s3, method, **kwargs)


def _get_object(fs: Any, bucket: str, key: str) -> tuple[str, str]:
    """An object's text and the ETag of that very content."""
    from fsspec.asyn import sync

    async def get() -> tuple[str, str]:
        found = await fs._call_s3("get_object", Bucket=bucket, Key=key)
        async with found["Body"] as stream:
            return (await stream.read()).decode(), found["ETag"]

    text, etag = sync(fs.loop, get)
    return str(text), str(etag)


@contextlib.contextmanager
def room_for(directory: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Turn a full filesystem met while writing ``what`` in ``directory`` into a WorkDirFull that says so."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.ENOSPC or isinstance(exc, WorkDirFull):
            raise
        try:
            usage = shutil.disk_usage(directory)
            free = f"{usage.free} of {usage.total} bytes are free there"
        except OSError:
            free = "its free space could not be read"
        raise WorkDirFull(errno.ENOSPC, (
            f"The filesystem of the work directory {directory} is full: writing {what} failed ({exc.strerror or exc}); "
            f"{free}. Nothing was committed. Free space there, or give work_dir a larger filesystem, then run the "
            "task again: it goes on from the files it had finished.")) from None
