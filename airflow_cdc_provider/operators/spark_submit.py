"""The base of the tasks that submit one of the provider's Spark applications (merge, verify): spark-submit
with the metastore's settings, the driver on this worker's Python unless the connection deploys it to the
cluster, and one application at a time on an embedded metastore."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook

from airflow_cdc_provider.compat import AirflowNotFoundException
from airflow_cdc_provider.core.config import HiveConfig, SparkConfig
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.spark.jvm import ClassArchive, batch_gc_options
from airflow_cdc_provider.spark.session import metastore_conf
from airflow_cdc_provider.storage import check_dir, make_dirs, own_file


class CdcSparkSubmitOperator(SparkSubmitOperator):
    """A SparkSubmitOperator for the provider's applications; ``_spark_submit(context, job_uri)`` runs one.

    :param spark: the configuration's ``spark:`` (``SparkConfig``): the Spark connection, and whether the driver
        JVM starts from a class-data archive kept on this worker (``class_archive``, with the throughput collector
        unless ``conf`` chooses one: ``airflow_cdc_provider.spark.jvm``).
    :param hive: the configuration's ``hive:`` (``HiveConfig``): the warehouse (an embedded metastore lives in it
        unless ``metastore_uri``), the metastore (``thrift://host:port``, or none), and the readers' zone.

    ``conf`` (SparkSubmitOperator's) holds the configuration's Spark settings (``spark: conf`` with
    ``merge_conf`` or ``verify_conf``, checked by ``core.config``); the metastore's settings are added here.
    """

    def __init__(self, *, application: str, spark: SparkConfig, hive: HiveConfig, **kwargs: Any) -> None:
        kwargs.setdefault("conn_id", spark.conn_id)
        super().__init__(application=application, **kwargs)
        self.spark, self.hive = spark, hive
        self._given: tuple[dict[str, Any], dict[str, Any]] | None = None

    def _spark_submit(self, context: Any, job_path: str) -> None:
        self.application_args = [job_path]
        # What was given, kept apart from what is added here, so that running the same instance again (a
        # retry in-process, the next batch) does not add the options twice.
        if self._given is None:
            self._given = (dict(self.conf or {}), dict(self.env_vars or {}))
        given_conf, given_env = self._given
        on_cluster = self._driver_on_cluster()
        self.conf = {**metastore_conf(self.hive.warehouse_dir, self.hive.metastore_uri), **given_conf}
        if not on_cluster and "spark.pyspark.driver.python" not in given_conf:
            # The driver runs here: with this worker's Python, which has this provider.
            self.conf["spark.pyspark.driver.python"] = sys.executable
        self.env_vars = dict(given_env)
        java_options = [given_conf.get("spark.driver.extraJavaOptions", "")]
        if not self.hive.metastore_uri and not on_cluster:  # Derby writes derby.log into its home, not the cwd
            java_options.append(f"-Dderby.system.home={os.path.abspath(self.hive.warehouse_dir)}")
        spark_submit = "spark-submit"
        if shutil.which(spark_submit) is None:
            bin_dir = str(Path(sys.executable).parent)
            self.env_vars["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
            spark_submit = str(Path(bin_dir) / spark_submit)
        archive = None
        if self.spark.class_archive and not on_cluster:
            archive = ClassArchive(spark_submit, extra_class_path=given_conf.get("spark.driver.extraClassPath", ""))
            if archive.refused:
                self.log.info("%s (spark: class_archive: false says so for good)", archive.refused)
            java_options += archive.java_options() + batch_gc_options(" ".join(java_options))
        self.conf["spark.driver.extraJavaOptions"] = " ".join(o for o in java_options if o)
        self._hook = None
        try:
            with self._metastore_turn():
                super().execute(context)
        except BaseException:
            if archive is not None:
                archive.job_failed()
            raise
        if archive is not None:
            archive.job_done()

    def _driver_on_cluster(self) -> bool:
        """Whether spark-submit puts the driver on a cluster node (``deploy-mode: cluster``, given to the operator
        or in the Spark connection's extra): then nothing of this worker's (its Python, its JVM class archive)
        may be named in the driver's settings."""
        mode = self._deploy_mode
        if mode is None:
            with contextlib.suppress(AirflowNotFoundException):
                mode = BaseHook.get_connection(self._conn_id).extra_dejson.get("deploy-mode")
        return str(mode or "").lower() == "cluster"

    @contextlib.contextmanager
    def _metastore_turn(self) -> Iterator[None]:
        """With the embedded metastore, one merge at a time on this warehouse: Derby admits one JVM, and a second
        one would fail on its lock. The turn is an exclusive ``flock`` of a file beside the metastore, held while
        the application runs; the kernel drops it if this process is killed. A thrift metastore needs no turn."""
        if self.hive.metastore_uri or "://" in self.hive.warehouse_dir:
            yield
            return
        path = Path(self.hive.warehouse_dir).absolute() / ".cdc-embedded-metastore.lock"
        # The embedded metastore's warehouse is on this machine's disk, written by this user's applications only:
        # whoever else could write it could replace a table's files or the metastore itself. (A thrift metastore's
        # warehouse is the cluster's storage, with the cluster's users and rules.)
        make_dirs(path.parent)
        check_dir(path.parent)
        with own_file(str(path)) as turn:
            try:
                fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.log.info("Waiting for the embedded metastore: another merge on %s is running (Derby admits one "
                              "application at a time; a thrift metastore lets merges run together).",
                              self.hive.warehouse_dir)
                started = time.monotonic()
                fcntl.flock(turn, fcntl.LOCK_EX)
                self.log.info("The embedded metastore is free after %.1f s of waiting.", time.monotonic() - started)
            yield

    def _require_spark_connection(self) -> None:
        # Without its connection, SparkSubmitHook quietly submits to YARN; say what is missing instead.
        try:
            BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException:
            raise CdcError(
                f"The Spark connection {self._conn_id!r} does not exist. Create it with conn_type `spark` and the "
                "master as its host (`local[*]` to run on the worker, or e.g. spark://host:7077), or set "
                "`spark_conn_id:` in the configuration to an existing one."
            ) from None
