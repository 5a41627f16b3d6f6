"""The driver JVM's options: the class-data archive's life cycle, and never two collectors."""

import os
import time

import pytest

from airflow_cdc_provider.spark.jvm import UNUSED_DAYS, WRITER_STALE_SECONDS, ClassArchive, batch_gc_options


def test_first_job_writes_the_archive_beside_and_later_jobs_map_it(tmp_path):
    first = ClassArchive("spark-submit", directory=tmp_path)
    options = first.java_options()
    assert options[0] == "-XX:+IgnoreUnrecognizedVMOptions"
    writing = options[1].removeprefix("-XX:ArchiveClassesAtExit=")
    assert writing != options[1] and writing.endswith(".tmp")
    open(writing, "wb").write(b"archive")  # what the JVM writes at its exit
    first.job_done()
    assert first.path.read_bytes() == b"archive"
    assert ClassArchive("spark-submit", directory=tmp_path).java_options()[1] == f"-XX:SharedArchiveFile={first.path}"


def _written(archive: ClassArchive) -> None:
    writing = archive.java_options()[1].removeprefix("-XX:ArchiveClassesAtExit=")
    open(writing, "wb").write(b"archive")
    archive.job_done()


def test_spark_installed_again_at_the_same_path_gets_a_new_archive_and_the_old_one_goes(tmp_path):
    # The JVM would ignore the old archive for the new jars: kept, it would cost every job its start-up.
    spark_submit = tmp_path / "bin" / "spark-submit"
    spark_submit.parent.mkdir()
    spark_submit.write_text("#!/bin/sh\n")
    cache = tmp_path / "cache"
    before = ClassArchive(str(spark_submit), directory=cache)
    cache.mkdir()
    unstamped = cache / f"{before.path.name.rsplit('-', 1)[0]}.jsa"  # the name archives had before the stamp
    unstamped.write_bytes(b"old")
    _written(before)
    other = ClassArchive(str(tmp_path / "elsewhere" / "spark-submit"), directory=cache)
    _written(other)
    assert ClassArchive(str(spark_submit), directory=cache).path == before.path  # the same installation
    spark_submit.write_text("#!/bin/sh\n# installed again\n")
    after = ClassArchive(str(spark_submit), directory=cache)
    assert after.path != before.path
    assert after.java_options()[1].startswith("-XX:ArchiveClassesAtExit=")  # written anew, not the stale one mapped
    open(after._writing, "wb").write(b"archive")
    after.job_done()
    assert sorted(p.name for p in cache.iterdir()) == sorted([after.path.name, other.path.name])


def test_a_failed_first_job_leaves_no_archive(tmp_path):
    archive = ClassArchive("spark-submit", directory=tmp_path)
    writing = archive.java_options()[1].removeprefix("-XX:ArchiveClassesAtExit=")
    open(writing, "wb").write(b"half")
    archive.job_failed()
    assert list(tmp_path.iterdir()) == []


def test_the_collector_is_left_alone_when_one_is_chosen():
    assert batch_gc_options("") == ["-XX:+UseParallelGC"]
    assert batch_gc_options("-Dx=1 -XX:+UseG1GC") == []


def test_jobs_that_start_while_one_writes_the_archive_start_without_one_and_an_abandoned_mark_is_taken_over(
        tmp_path):
    writer = ClassArchive("spark-submit", directory=tmp_path)
    assert writer.java_options()[1].startswith("-XX:ArchiveClassesAtExit=")
    other = ClassArchive("spark-submit", directory=tmp_path)
    assert other.java_options() == ["-XX:+IgnoreUnrecognizedVMOptions"], "no second archive written at once"
    other.job_done()
    assert writer._mark.exists(), "a job that wrote nothing leaves the writer's mark"
    _written_by(writer)
    assert not writer._mark.exists()
    assert ClassArchive("spark-submit", directory=tmp_path).java_options()[1].startswith("-XX:SharedArchiveFile=")

    # A writer that died (its process is gone) or hangs past the limit: the next job writes the archive.
    cache = tmp_path / "again"
    dead = ClassArchive("spark-submit", directory=cache)
    cache.mkdir()
    dead._mark.write_text("999999999")  # no such process
    assert dead.java_options()[1].startswith("-XX:ArchiveClassesAtExit=")
    dead.job_failed()
    assert not dead._mark.exists() and list(cache.iterdir()) == []
    hung = ClassArchive("spark-submit", directory=cache)
    hung._mark.write_text(str(os.getpid()))  # alive
    assert hung.java_options() == ["-XX:+IgnoreUnrecognizedVMOptions"]
    os.utime(hung._mark, (time.time() - WRITER_STALE_SECONDS - 1,) * 2)
    assert hung.java_options()[1].startswith("-XX:ArchiveClassesAtExit=")


def _written_by(archive: ClassArchive) -> None:
    open(archive._writing, "wb").write(b"archive")
    archive.job_done()


def test_another_conf_directory_on_the_class_path_gets_an_archive_of_its_own(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    plain = ClassArchive("spark-submit", directory=tmp_path).path
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    assert ClassArchive("spark-submit", directory=tmp_path).path != plain
    _written_by_new(ClassArchive("spark-submit", directory=tmp_path))
    monkeypatch.delenv("SPARK_CONF_DIR")
    _written_by_new(ClassArchive("spark-submit", directory=tmp_path))
    assert len(list(tmp_path.glob("*.jsa"))) == 2, "both serve the same installation: neither removes the other"


def _written_by_new(archive: ClassArchive) -> None:
    writing = archive.java_options()[1].removeprefix("-XX:ArchiveClassesAtExit=")
    open(writing, "wb").write(b"archive")
    archive.job_done()


def test_archives_no_job_mapped_for_a_week_are_removed_when_an_archive_is_written(tmp_path):
    # An installation removed, or a checkout deleted, leaves its 200 MB archive behind: nothing else would remove it.
    cache = tmp_path / "cache"
    in_use = ClassArchive(str(tmp_path / "a" / "spark-submit"), directory=cache)
    _written(in_use)
    gone = ClassArchive(str(tmp_path / "b" / "spark-submit"), directory=cache)
    _written(gone)
    long_ago = time.time() - UNUSED_DAYS * 86400 - 60
    for archive in (in_use.path, gone.path):
        os.utime(archive, (long_ago, long_ago))
    assert ClassArchive(str(tmp_path / "a" / "spark-submit"), directory=cache).java_options()[1].startswith(
        "-XX:SharedArchiveFile=")  # mapped today: marked as used
    _written(ClassArchive(str(tmp_path / "c" / "spark-submit"), directory=cache))
    assert in_use.path.exists() and not gone.path.exists()


@pytest.mark.parametrize("variable", ["SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH",
                                      "SPARK_CLASSPATH", "extraClassPath"])
def test_no_archive_while_a_directory_on_the_class_path_holds_a_file(tmp_path, monkeypatch, variable):
    # A JVM writing an archive will not start with one (JDK 17: "non-empty directory"): every merge would fail.
    for name in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH"):
        monkeypatch.delenv(name, raising=False)
    conf = tmp_path / "conf"
    conf.mkdir()
    cache = tmp_path / "cache"

    def archive() -> ClassArchive:
        extra = f"/opt/jars/a.jar:{conf}" if variable == "extraClassPath" else ""
        return ClassArchive("spark-submit", directory=cache, extra_class_path=extra)

    if variable != "extraClassPath":
        monkeypatch.setenv(variable, f"/opt/jars/*:{conf}" if variable.endswith("CLASSPATH") else str(conf))
    empty = archive()
    assert empty.refused is None, "an empty directory is no obstacle"
    assert empty.java_options()[1].startswith("-XX:ArchiveClassesAtExit=")
    empty.job_failed()
    (conf / "hive-site.xml").write_text("<configuration/>")
    refused = archive()
    assert refused.java_options() == []
    assert refused.refused and f"has the directory {conf}, which holds files" in refused.refused
    assert not cache.exists() or not list(cache.glob(".*.writing")), "no writer's mark left by a job that writes nothing"


def test_spark_homes_conf_directory_counts_when_no_conf_dir_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (home / "conf").mkdir()
    assert ClassArchive(str(home / "bin" / "spark-submit"), directory=tmp_path / "cache").refused is None
    (home / "conf" / "spark-defaults.conf").write_text("spark.master yarn\n")
    assert ClassArchive(str(home / "bin" / "spark-submit"), directory=tmp_path / "cache").refused
    # Or the installation SPARK_HOME names, wherever spark-submit is.
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert ClassArchive("spark-submit", directory=tmp_path / "cache").refused
