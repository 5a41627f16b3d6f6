"""Files through Hadoop's FileSystem, as the provider's Spark jobs read and write them: a job file, a result, a
table's version directories, on whatever filesystem the cluster reaches (a disk, HDFS, S3)."""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.ledger import VERSION_FILE
from airflow_cdc_provider.core.merge import parse_version_dir, retention, version_dir_name


class HadoopFiles:
    """The table's directories, through Hadoop's FileSystem, so a warehouse on HDFS or S3 works the same."""

    def __init__(self, spark: Any, root: str) -> None:
        # A SparkSession or a SparkContext: both hold the JVM and the Java context.
        self.jvm = spark._jvm
        self.conf = spark._jsc.hadoopConfiguration()
        self.root = root.rstrip("/")

    def _path(self, path: str) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(path)

    def _fs(self, path: str) -> Any:
        return self._path(path).getFileSystem(self.conf)

    def parent(self, path: str) -> str:
        """The directory ``path`` is in, as Hadoop names it."""
        return str(self._path(path.rstrip("/")).getParent().toString())

    def version_path(self, version: int) -> str:
        return f"{self.root}/{version_dir_name(version)}"

    def versions(self) -> dict[int, bool]:
        """Each version directory under the root, and whether its write finished (it has a version file)."""
        fs = self._fs(self.root)
        if not fs.exists(self._path(self.root)):
            return {}
        found = {}
        for status in fs.listStatus(self._path(self.root)):
            number = parse_version_dir(status.getPath().getName())
            if number is not None and status.isDirectory():
                found[number] = fs.exists(self._path(f"{self.version_path(number)}/{VERSION_FILE}"))
        return found

    def children(self, path: str) -> list[str]:
        """The full names of what the directory ``path`` holds (none when it does not exist)."""
        fs = self._fs(path)
        if not fs.exists(self._path(path)):
            return []
        return [str(status.getPath().toString()) for status in fs.listStatus(self._path(path))]

    def is_directory(self, path: str) -> bool:
        fs = self._fs(path)
        return bool(fs.exists(self._path(path)) and fs.getFileStatus(self._path(path)).isDirectory())

    def qualified(self, path: str) -> str:
        """``path`` with its filesystem (``file:/…``), as the metastore keeps a location."""
        p = self._path(path)
        return str(p.getFileSystem(self.conf).makeQualified(p).toString())

    def read_text(self, path: str) -> str | None:
        fs = self._fs(path)
        if not fs.exists(self._path(path)):
            return None
        stream = fs.open(self._path(path))
        try:
            return str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, path: str, text: str, overwrite: bool = False) -> None:
        stream = self._fs(path).create(self._path(path), overwrite)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def delete(self, path: str) -> None:
        self._fs(path).delete(self._path(path), True)

    def exists(self, path: str) -> bool:
        return bool(self._fs(path).exists(self._path(path)))


def prune(files: HadoopFiles, location: str, referenced: set[str]) -> None:
    """Delete ``location`` but the partition directories in it that ``referenced`` names (``retention``)."""
    what = retention(location, referenced)
    if what == "delete":
        files.delete(location)
    elif what == "descend":
        for child in files.children(location):
            prune(files, child, referenced)
