"""Where a table's work state lives under ``work_dir``: the one place that names its files and directories.

    <work_dir>/<database>.<table>/                 TableDir
        ledger/lock.json                           the run updating the table now (``core.ledger.Lock``)
        ledger/committed.json                      the version last committed (``core.ledger.Committed``)
        ledger/runs/<run>.json                     what each run planned (``core.ledger.RunPlan``)
        verify/state.json                          runs since the last verify (``VerifyState``)
        verify/repair.json                         the buckets the last verify found different (``RepairRequest``)
        verify/<run>.json                          a verify's report (``core.contract.TableVerification``)
        digests/<run>.parquet                      a diff-mode version's row digests (``stages.diff``)
        runs/<run>/                                RunDir: one run's files
            raw/                                   the extraction's raw files
            snapshot/                              snapshot chunks and ``snapshot-progress.json``
            upsert.parquet, delete.parquet, fills.parquet   the replay's output
            merge-job-<n>.json, merge-result-<n>.json       a merge application's job and result
            verify-jobs.json, verify-result.json, verify-source-sums.json   verify's Spark half
            heal/                                  a heal (``stages.heal``): its diff's upserts and deletes
            heal/reload/                           a table the heal loads anew: its snapshot's files
            heal/version-digests/                  the Spark job's digests of the version the heal compares with
            heal-digests-jobs.json                 that job's jobs, one per table healed in the run
    <work_dir>/_catalog/<dag_id>.<group>.json      SourceDir: the tables a source's last run captured

Pure string joins, no I/O: the Spark jobs use it too. ``work_dir`` is a path or a URI; every location here is
the same kind (see ``airflow_cdc_provider.storage``).
"""

from __future__ import annotations

import posixpath
from urllib.parse import urlsplit

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.model import Model

# Which locations can be a work directory: the rule alone, without touching it (``airflow_cdc_provider.storage``
# reads and writes there).
LOCAL_SCHEMES = ("", "file")
OBJECT_SCHEMES = ("s3", "s3a")
SCHEMES = LOCAL_SCHEMES + OBJECT_SCHEMES


class StorageError(CdcError):
    """The work directory cannot be used as given."""


class UnsafeWorkDir(StorageError):
    """A directory or file of the work state that another user could write: its content cannot be trusted."""


# Whoever can write the work directory decides what the Spark job switches and deletes (the merge job file), which
# rows reach the table (raw files) and whether a table runs at all (its lock). Another user may write there when a
# directory is group- or world-writable or is theirs; a file of the work state that is not ours was planted.
_WRITABLE_BY_OTHERS = 0o022


def access_problem(path: str, mode: int, owner: int, our_uid: int, directory: bool = True) -> str | None:
    """Why another user than ours could have written ``path`` (a directory of the work state, or a file with
    ``directory`` false), given its ``st_mode`` and ``st_uid``; None when only we can. The message says what to
    do."""
    kind = "directory" if directory else "file"
    if owner != our_uid:
        return (f"The {kind} {path} belongs to the user id {owner}, not to this process's ({our_uid}): whoever owns "
                f"the work state can change what the runs write to Hive. Give it to the user the tasks run as "
                f"(`chown -R {our_uid} {path}`), or use a directory of that user's own.")
    if mode & _WRITABLE_BY_OTHERS:
        who = " and ".join(w for w, bit in (("its group", 0o020), ("every user", 0o002)) if mode & bit)
        fix = f"chmod 700 {path}" if directory else f"chmod 600 {path}"
        return (f"The {kind} {path} can be written by {who} (mode {mode & 0o7777:04o}): another user could plant "
                f"files there that the runs would trust. Make it this user's alone (`{fix}`), or use a directory "
                f"of its own.")
    return None


def scheme_of(location: str) -> str:
    """The URI scheme of ``location`` ("" for a plain path)."""
    if "://" not in location:
        return ""
    return urlsplit(location).scheme.lower()


def local_path(location: str) -> str:
    """The path of a local location: a plain path, or a file:// URI's path."""
    return urlsplit(location).path if location.startswith("file:") else location


def check_work_dir(location: str, where: str = "`work_dir:`") -> str:
    """``location`` if the work directory can hold a lock there, else a StorageError that says why."""
    if not isinstance(location, str) or not location.strip():
        raise StorageError(f"{where} must be a path or a URI (file://, s3://), got {location!r}.")
    scheme = scheme_of(location)
    if scheme not in SCHEMES:
        raise StorageError(
            f"{where} is {location!r}: the scheme {scheme!r} is not supported. The table locks in the work directory "
            "need an atomic create-if-absent and compare-and-swap, which this provider uses on a local or shared "
            "disk (a path or file://) and on S3 (s3://, conditional PutObject). Use one of those.")
    if scheme in OBJECT_SCHEMES and not urlsplit(location).netloc:
        raise StorageError(f"{where} is {location!r}: an s3:// work directory needs a bucket, as s3://bucket/prefix.")
    if scheme in LOCAL_SCHEMES and not posixpath.isabs(local_path(location)):
        raise StorageError(f"{where} is {location!r}: give an absolute path, so that every worker finds the same "
                           "directory.")
    return location


def location_problem(location: str, what: str) -> str | None:
    """Why ``location`` (a path or URI a job names) cannot be used in a job, or None."""
    if not isinstance(location, str) or not location.strip():
        return f"The {what} {location!r} is empty: a job names every file by its full path or URI."
    if any(ord(ch) < 0x20 or ch in "'\\" for ch in location):
        return (f"The {what} {location!r} holds a quote, a backslash or a control character, which the job's "
                "statements cannot carry: choose a location without them.")
    if has_dot_segments(location):
        return f"The {what} {location!r} holds a `.` or `..` segment: a job names every location plainly."
    if not location.startswith("/") and "://" not in location and not location.startswith("file:/"):
        return f"The {what} {location!r} is neither an absolute path nor a URI."
    return None


def has_dot_segments(location: str) -> bool:
    """Whether ``location`` holds a ``.`` or ``..`` segment, by which a path names a place other than it seems."""
    return any(part in (".", "..") for part in urlsplit(location).path.split("/")) or \
        any(part in (".", "..") for part in location.split("/"))


def place(location: str) -> tuple[str, str, str]:
    """(scheme, authority, path) of a location: "" for a plain path's scheme, s3a and s3n as s3."""
    parts = urlsplit(location)
    scheme = {"s3a": "s3", "s3n": "s3"}.get(parts.scheme.lower(), parts.scheme.lower())
    return scheme, parts.netloc if scheme not in ("", "file") else "", parts.path.rstrip("/")


def within(location: str, directory: str) -> bool:
    """Whether ``location`` is ``directory`` or under it. A plain path is on the cluster's default filesystem,
    whatever its scheme, so a plain path on either side is compared by its path alone."""
    scheme, authority, path = place(location)
    home_scheme, home_authority, home = place(directory)
    if scheme and home_scheme and (scheme, authority) != (home_scheme, home_authority):
        return False
    return not has_dot_segments(location) and (path == home or path.startswith(f"{home}/"))


# Names of the files a stage writes into a directory it is given (locally, or in a scratch directory uploaded
# under the run's directory afterwards).
UPSERT_FILE = "upsert.parquet"
DELETE_FILE = "delete.parquet"
FILLS_FILE = "fills.parquet"
EVENTS_FILE = "events.parquet"  # every row event of the range (``stages.events``), for a changelog of ``mode: all``
SNAPSHOT_PROGRESS_FILE = "snapshot-progress.json"
DIGESTS_FILE = "digests.parquet"  # a diff-mode table's row digests (``stages.diff``), of the version a run makes


def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` appended, as a path or a URI the same way."""
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


class TableDir(Model):
    """One Hive table's state in the work directory: its ledger, its verify state and its runs' files."""

    work_dir: str
    hive_table: str  # database.table
    shard: str | None = None  # a shard's directory (``core.shards.Shard.path``): its own state, under the table's

    @property
    def root(self) -> str:
        table = join(self.work_dir, self.hive_table)
        return join(table, "shards", self.shard) if self.shard is not None else table

    # The ledger

    @property
    def ledger(self) -> str:
        return join(self.root, "ledger")

    @property
    def lock(self) -> str:
        return join(self.ledger, "lock.json")

    @property
    def committed(self) -> str:
        return join(self.ledger, "committed.json")

    def run_plan(self, run_key: str) -> str:
        return join(self.ledger, "runs", f"{run_key}.json")

    # Verify

    @property
    def verify(self) -> str:
        return join(self.root, "verify")

    @property
    def verify_state(self) -> str:
        return join(self.verify, "state.json")

    @property
    def repair(self) -> str:
        return join(self.verify, "repair.json")

    def verify_report(self, run_key: str) -> str:
        return join(self.verify, f"{run_key}.json")

    # Diff mode

    @property
    def digests(self) -> str:
        """The directory of the row digests of the versions diff-mode runs made (``stages.diff``): kept apart from
        the runs' files, which go after a few runs, while a version's digests serve as long as it is the last."""
        return join(self.root, "digests")

    def digests_file(self, run_key: str) -> str:
        return join(self.digests, f"{run_key}.parquet")

    # The runs' files

    @property
    def runs(self) -> str:
        """The directory of every run's directory (``run``), named by the run's key."""
        return join(self.root, "runs")

    def run(self, run_key: str) -> RunDir:
        return RunDir(table=self, key=run_key)


class RunDir(Model):
    """One run's files of one table."""

    table: TableDir
    key: str  # the run's key (``core.ledger.RunRef.key``)

    @property
    def root(self) -> str:
        return join(self.table.runs, self.key)

    @property
    def raw(self) -> str:
        return join(self.root, "raw")

    @property
    def snapshot(self) -> str:
        return join(self.root, "snapshot")

    @property
    def snapshot_progress(self) -> str:
        return join(self.snapshot, SNAPSHOT_PROGRESS_FILE)

    def merge_job(self, number: int) -> str:
        return join(self.root, f"merge-job-{number}.json")

    def merge_result(self, number: int) -> str:
        return join(self.root, f"merge-result-{number}.json")

    @property
    def heal(self) -> str:
        return join(self.root, "heal")

    @property
    def reload(self) -> str:
        """A table the heal loads anew: its snapshot's files (``stages.heal``)."""
        return join(self.heal, "reload")

    @property
    def heal_version_digests(self) -> str:
        return join(self.heal, "version-digests")

    def heal_version_digests_part(self, name: str) -> str:
        """A file the digests job wrote into ``heal_version_digests``."""
        return join(self.heal_version_digests, name)

    @property
    def heal_digests_jobs(self) -> str:
        return join(self.root, "heal-digests-jobs.json")

    @property
    def verify_jobs(self) -> str:
        return join(self.root, "verify-jobs.json")

    @property
    def verify_result(self) -> str:
        return join(self.root, "verify-result.json")

    @property
    def verify_source_sums(self) -> str:
        return join(self.root, "verify-source-sums.json")


def capture_dir_problem(location: str, hive_table: str, run_key: str, shard: str | None = None) -> str | None:
    """Why ``location`` is not a run's directory of ``hive_table`` (of its ``shard``: ``TableDir.shard``) for the
    run ``run_key`` (``RunDir.root``: ``<work_dir>/<hive_table>[/shards/<shard>]/runs/<run_key>``), or None."""
    own = f"{hive_table}/shards/{shard}" if shard is not None else hive_table
    if place(location)[2].endswith(f"/{own}/runs/{run_key}"):
        return None
    return (f"The run directory {location!r} is not the directory of {own}'s run {run_key} "
            f"(<work_dir>/{own}/runs/{run_key}): a merge reads only what its own run wrote.")


def task_group(task_id: str) -> str:
    """The task group of a source's task (``group.plan``: ``group``); "" for a task outside any group."""
    return task_id.rsplit(".", 1)[0] if "." in task_id else ""


class SourceDir(Model):
    """What the work directory keeps of one source (one DAG's task group): the tables its last run captured."""

    work_dir: str
    dag_id: str
    group: str  # the task group of the source's tasks; "tables" outside any group

    @classmethod
    def of_task(cls, work_dir: str, dag_id: str, task_id: str) -> SourceDir:
        return cls(work_dir=work_dir, dag_id=dag_id, group=task_group(task_id) or "tables")

    @property
    def catalog(self) -> str:
        return join(self.work_dir, "_catalog", f"{self.dag_id}.{self.group}.json")
