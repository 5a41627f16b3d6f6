"""A class-data archive for the short-lived driver JVMs of the provider's jobs.

A merge spends more time starting its JVM (loading some 20,000 classes of Spark and Hive) than merging a
table of a few million rows. The JVM can map the classes from an archive it wrote on an earlier run (dynamic
class-data sharing, JDK 13+): measured here, a 2-million-row merge took 11.8 s instead of 17 s.

The first run on a machine writes the archive (that run is slower, once); later runs map it. The JVM checks
the archive against its own version and class path and ignores it, with a warning, when they differ; older
JVMs skip the options (``IgnoreUnrecognizedVMOptions``). Nothing here is needed for a correct result.

An archive the JVM ignores costs every later job its start-up again, silently: measured here, a stale archive
(Spark installed again at the same path) made an end-to-end test 35% slower. So an archive is named by the
installation it was written for, not only its path: the spark-submit and java it ran, each with its file's
time and size, which an upgrade or a new environment at the same path changes, and the directories the environment
adds to the class path (``SPARK_CONF_DIR`` and the like: measured, a test's jobs started with another conf directory
ran cold, 25 s of CPU more for an end-to-end test). The archives of the installation before are removed once the
new one is written (each is some 200 MB). So are the archives no job has mapped for ``UNUSED_DAYS``: those of a
Spark installation removed, or of a checkout deleted (a job marks its archive's time when it maps it).

A JVM that writes an archive refuses to start when a directory on its class path holds any file (JDK 17:
``Error: non-empty directory``, then ``Error occurred during initialization of VM``). spark-class puts the
configuration directory there (``SPARK_CONF_DIR``, or ``$SPARK_HOME/conf``), and ``HADOOP_CONF_DIR``,
``YARN_CONF_DIR``, ``SPARK_DIST_CLASSPATH`` and ``spark.driver.extraClassPath``: on a worker whose Spark has a
``spark-defaults.conf`` or a ``hive-site.xml``, or on any Hadoop edge node, every merge would fail. So no archive
is used while any of those directories holds a file (``ClassArchive.refused`` says which), and the job starts as
it would without this module.

One job writes the archive; the jobs that start while it does run without one. Writing it costs a job about four
times the CPU of a job that maps it (measured on a fresh machine: 50 s against 10 s for a small merge), and the
first jobs of a machine often start together (a test suite's, several tables' DAGs): each would otherwise write
its own, and all but the last be thrown away. The writer marks the archive's name (``.<name>.writing``, with its
process id); a mark whose process is gone, or older than ``WRITER_STALE_SECONDS``, is taken over.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import time
import uuid
from pathlib import Path

WRITER_STALE_SECONDS = 900
UNUSED_DAYS = 7
# The environment variables whose directories spark-class adds to the driver's class path (Spark's launcher).
CLASS_PATH_VARIABLES = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH")


def batch_gc_options(existing: str = "") -> list[str]:
    """The throughput collector for a short batch driver, unless the options already choose a collector.

    Measured here with the archive: a 2-million-row merge in 10.4 s with ParallelGC, 11.8 s with the default
    G1. Two collectors in one command line stop the JVM, hence the check.
    """
    chosen = any(o.startswith("-XX:+Use") and o.endswith("GC") for o in existing.split())
    return [] if chosen else ["-XX:+UseParallelGC"]


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-cdc-provider" / "jvm"


def _stamp(path: str) -> str:
    """A file's modification time and size: what an installation over it changes."""
    try:
        found = os.stat(path)
    except OSError:
        return ""
    return f"{found.st_mtime_ns}:{found.st_size}"


def _mark_used(archive: Path) -> None:
    """The archive's time set to now: an archive in use is never taken for an abandoned one."""
    try:
        os.utime(archive)
    except OSError:
        pass  # another user's cache, read-only: the archive is still mapped


def _spark_homes(spark_submit: str) -> list[str]:
    """Where spark-submit may take its installation from: ``SPARK_HOME``, the directory above its ``bin``, and
    the pyspark package a pip-installed spark-submit finds (each conf directory is looked at: the one spark-class
    uses is among them)."""
    homes = [os.environ.get("SPARK_HOME", ""), str(Path(spark_submit).parent.parent)]
    found = importlib.util.find_spec("pyspark")
    if found is not None and found.origin:
        homes.append(str(Path(found.origin).parent))
    return [h for h in homes if h]


def class_path_directories(spark_submit: str, extra_class_path: str = "") -> list[str]:
    """The directories spark-class may put on the driver's class path (Spark's launcher: ``SPARK_CLASSPATH``,
    the application's extra class path, the conf directory, ``HADOOP_CONF_DIR``, ``YARN_CONF_DIR`` and
    ``SPARK_DIST_CLASSPATH``); jar files and ``dir/*`` globs are not directories and are left out."""
    entries = [*os.environ.get("SPARK_CLASSPATH", "").split(os.pathsep), *extra_class_path.split(os.pathsep)]
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    entries += [conf_dir] if conf_dir else [os.path.join(home, "conf") for home in _spark_homes(spark_submit)]
    for name in CLASS_PATH_VARIABLES[1:]:
        entries += os.environ.get(name, "").split(os.pathsep)
    return [e for e in dict.fromkeys(entries) if e and not e.endswith("*")]


def _holding_files(directory: str) -> bool:
    try:
        with os.scandir(directory) as listing:
            return any(True for _ in listing)
    except (NotADirectoryError, FileNotFoundError):
        return False
    except OSError:
        return True  # unreadable here, perhaps not to the JVM: taken as holding files


class ClassArchive:
    """The JVM options that use (or write) the archive for one spark-submit, and the step after the job.

    ``extra_class_path``: the job's ``spark.driver.extraClassPath``. ``refused``: why no archive is used (a
    directory on the class path holds files), or None."""

    def __init__(self, spark_submit: str = "spark-submit", directory: Path | None = None,
                 extra_class_path: str = "") -> None:
        resolved = os.path.realpath(shutil.which(spark_submit) or spark_submit)
        held = [d for d in class_path_directories(resolved, extra_class_path) if _holding_files(d)]
        self.refused = (f"no class-data archive: the driver's class path has the directory {held[0]}, which holds "
                        "files, and a JVM writing an archive will not start with one") if held else None
        java_home = os.environ.get("JAVA_HOME")
        java = os.path.realpath(os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or "java")
        where = hashlib.sha1(resolved.encode()).hexdigest()[:12]
        what = hashlib.sha1(f"{_stamp(resolved)}|{java}|{_stamp(java)}".encode()).hexdigest()[:8]
        # What else spark-class puts on the class path: a job started with another of these has another class path,
        # and an archive of its own (kept beside the other: both may serve jobs of one installation).
        paths = "|".join(os.environ.get(name, "") for name in CLASS_PATH_VARIABLES)
        also = f"-{hashlib.sha1(paths.encode()).hexdigest()[:8]}" if paths.strip("|") else ""
        self.directory = directory or cache_dir()
        self._prefix = f"spark-driver-{where}-"
        self._installation = f"{self._prefix}{what}"
        self.path = self.directory / f"{self._installation}{also}.jsa"
        self._writing: Path | None = None

    @property
    def _mark(self) -> Path:
        return self.directory / f".{self.path.name}.writing"

    def java_options(self) -> list[str]:
        if self.refused:
            return []
        options = ["-XX:+IgnoreUnrecognizedVMOptions"]
        if self.path.exists():
            _mark_used(self.path)
            return [*options, f"-XX:SharedArchiveFile={self.path}"]
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self._take_mark():
            return options  # another job is writing it: this one starts without
        # Written beside and renamed after a successful job: a reader never maps a half-written file.
        self._writing = self.directory / f".{self.path.name}.{uuid.uuid4().hex}.tmp"
        return [*options, f"-XX:ArchiveClassesAtExit={self._writing}"]

    def _take_mark(self) -> bool:
        """Whether this job writes the archive: it made the writer's mark, or took over one left by a job gone."""
        for _ in range(2):
            try:
                with open(self._mark, "x") as mark:
                    mark.write(str(os.getpid()))
                return True
            except FileExistsError:
                if not self._mark_abandoned():
                    return False
                self._mark.unlink(missing_ok=True)  # and try once more: another job may take it first
        return False

    def _mark_abandoned(self) -> bool:
        try:
            pid = int(self._mark.read_text() or 0)
            age = time.time() - self._mark.stat().st_mtime
        except (OSError, ValueError):
            return False  # being written or removed this moment
        if age > WRITER_STALE_SECONDS:
            return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False

    def job_done(self) -> None:
        if self._writing is not None and self._writing.exists():
            os.replace(self._writing, self.path)
            self._remove_stale()
        self._release()

    def _remove_stale(self) -> None:
        """The archives of the same spark-submit installed before (under the name they had before the stamp too),
        which the JVM would ignore, and those no job has mapped for ``UNUSED_DAYS``, which nothing else removes."""
        unused_since = time.time() - UNUSED_DAYS * 86400
        for archive in self.directory.glob("spark-driver-*.jsa"):
            replaced = (archive.name.startswith(self._prefix) or archive.name == f"{self._prefix[:-1]}.jsa") and \
                not archive.name.startswith(self._installation)
            try:
                if replaced or archive.stat().st_mtime < unused_since:
                    archive.unlink()
            except OSError:
                pass  # removed by another job this moment

    def job_failed(self) -> None:
        if self._writing is not None:
            self._writing.unlink(missing_ok=True)
        self._release()

    def _release(self) -> None:
        if self._writing is not None:
            self._mark.unlink(missing_ok=True)
        self._writing = None
