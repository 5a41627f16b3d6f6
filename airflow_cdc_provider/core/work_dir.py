"""Which locations can be a work directory: the rule alone, without touching it (``airflow_cdc_provider.storage``
reads and writes there)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from airflow_cdc_provider.core.errors import CdcError

LOCAL_SCHEMES = ("", "file")
OBJECT_SCHEMES = ("s3", "s3a")
SCHEMES = LOCAL_SCHEMES + OBJECT_SCHEMES


class StorageError(CdcError):
    """The work directory cannot be used as given."""


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
    if scheme in LOCAL_SCHEMES and not os.path.isabs(local_path(location)):
        raise StorageError(f"{where} is {location!r}: give an absolute path, so that every worker finds the same "
                           "directory.")
    return location
