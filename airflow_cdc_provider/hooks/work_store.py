"""The work directory's filesystem, with its credentials from an Airflow connection."""

from __future__ import annotations

from airflow_cdc_provider.core.workdir import LOCAL_SCHEMES, check_work_dir, scheme_of
from airflow_cdc_provider.storage import WorkStore


def work_store(location: str, conn_id: str | None = None) -> WorkStore:
    """The store of ``location`` (the work directory or a path under it).

    On an object store the filesystem comes from Airflow's ``ObjectStoragePath``: ``s3://`` needs the Amazon
    provider (the ``s3`` extra) and takes its credentials and endpoint from the ``aws`` connection ``conn_id``
    (the ``work_conn_id:`` setting; None: the provider's default credentials). On a disk ``location`` is made
    if missing (mode 0700) and refused if another user owns it or can write it (``storage.check_dir``), as is
    each directory under it that a write goes through.
    """
    check_work_dir(location)
    if scheme_of(location) in LOCAL_SCHEMES:
        return WorkStore(root=location).open_root()
    from airflow.sdk import ObjectStoragePath

    return WorkStore(ObjectStoragePath(location, conn_id=conn_id).fs)
