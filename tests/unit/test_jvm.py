"""The driver JVM's options: the class-data archive's life cycle, and never two collectors."""

from airflow_cdc_provider.spark.jvm import ClassArchive, batch_gc_options


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


def test_a_failed_first_job_leaves_no_archive(tmp_path):
    archive = ClassArchive("spark-submit", directory=tmp_path)
    writing = archive.java_options()[1].removeprefix("-XX:ArchiveClassesAtExit=")
    open(writing, "wb").write(b"half")
    archive.job_failed()
    assert list(tmp_path.iterdir()) == []


def test_the_collector_is_left_alone_when_one_is_chosen():
    assert batch_gc_options("") == ["-XX:+UseParallelGC"]
    assert batch_gc_options("-Dx=1 -XX:+UseG1GC") == []
