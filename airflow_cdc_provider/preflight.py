"""The pre-flight: before the first load, everything a run would refuse, found at once and told with its fix.

    python -m airflow_cdc_provider.preflight path/to/cdc.yaml [more.yaml ...]
    airflow cdc preflight path/to/cdc.yaml              (Airflow 3.3+, which loads providers' commands)

Run it where the tasks run (a worker, or a machine with the same connections and the same user): it reads the
connections the configuration names, as the tasks do. It checks

- the source: the login, the binlog's settings (its compression told), the capture user's privileges (missing,
  and beyond what capture needs), each table's key and column types, and the foreign keys with a cascading action
  a table read from the binlog is the child of: the check task's own logic (``stages.check.inspect``);
- the work directory: who owns it and who may write it, as the tasks require (``storage``);
- Spark: its connection, the ``spark-submit`` the merge would run, and the Java it needs (17 or later);
- Hive: a metastore service answers at its address, or the embedded metastore's warehouse can be written.

It changes nothing: no directory is made, nothing is written at the source. Exit status 1 when something must be
fixed before the first load, else 0 (warnings do not count).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.core.errors import CdcError

JAVA_NEEDED = 17
NETWORK_TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class Finding:
    """One thing the pre-flight found: ``ok`` (what holds), ``warning`` (works, but look) or ``problem`` (the
    first run would fail, or lose something): each problem's text says its fix."""

    level: str  # ok, warning, problem
    area: str  # source, tables, work directory, spark, hive
    text: str


@dataclass
class Report:
    origin: str
    findings: list[Finding] = field(default_factory=list)

    def add(self, level: str, area: str, text: str) -> None:
        self.findings.append(Finding(level, area, text))

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "problem"]

    def lines(self) -> Iterator[str]:
        yield f"Pre-flight of {self.origin}:"
        for finding in self.findings:
            label = {"ok": "ok     ", "warning": "WARNING", "problem": "PROBLEM"}[finding.level]
            first, *rest = finding.text.splitlines() or [""]
            yield f"  {label} [{finding.area}] {first}"
            yield from (f"            {line}" for line in rest)
        problems = len(self.problems)
        yield (f"{problems} problem{'s' if problems != 1 else ''} to fix before the first load." if problems else
               "Ready for the first load.")


def preflight(config: CdcConfig, origin: str = "the configuration") -> Report:
    """Every check, each in turn: one that cannot run (a login refused) leaves the others to run."""
    report = Report(origin)
    _source(config, report)
    _work_dir(config, report)
    _spark(config, report)
    _hive(config, report)
    return report


def _source(config: CdcConfig, report: Report) -> None:
    from airflow_cdc_provider.compat import AirflowNotFoundException
    from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
    from airflow_cdc_provider.stages.check import CheckDefaults, how_captured, inspect

    source = config.source
    defaults = CheckDefaults(hive=config.hive, schema_changes=config.run.schema_changes, capture=source.capture)
    try:
        hook = MySqlSourceHook(source.mysql_conn_id, statement_timeout_seconds=source.statement_timeout_seconds,
                               read_timeout_seconds=source.read_timeout_seconds)
        flavor = hook.flavor  # the first statement: the login
        found = inspect(hook, config.tables, defaults, {})
    except AirflowNotFoundException:
        report.add("problem", "source", f"The connection {source.mysql_conn_id!r} does not exist. Create it with "
                   "conn_type `mysql` (host, port, the capture user's login and password), or set `source: "
                   "mysql_conn_id:` to an existing one.")
        return
    except (CdcError, OSError) as exc:
        report.add("problem", "source", f"{exc}")
        return
    report.add("ok", "source", f"{flavor} through the connection {source.mysql_conn_id!r}")
    if found.refused is not None:
        for problem in found.refused.problems:
            report.add("problem", "source", problem)
        if found.refused.way_on:
            report.add("warning", "source", found.refused.way_on)
    elif found.binlog:
        report.add("ok", "source", "the binlog's settings and the capture user's privileges serve")
    else:
        report.add("ok", "source", "every table is read by a diff: the capture user's SELECT serves")
    for note in found.notes:
        report.add("ok", "source", note)
    for warning in found.warnings:
        report.add("warning", "source", warning)
    for stopped in found.stopped:
        report.add("problem", "tables", stopped.reason)
    for left_out in found.skipped:
        report.add("warning", "tables", f"left out (matched by a pattern, but cannot be captured): {left_out.reason}")
    for table in found.captured:
        report.add("ok", "tables", f"{table.source} → {table.hive_table}: {how_captured(table)}")
    if not found.captured and not found.stopped:
        report.add("warning", "tables", "no table of the configuration is at the source, or the capture user can "
                   "see none: check the `tables:` entries and the user's SELECT.")


def _work_dir(config: CdcConfig, report: Report) -> None:
    from airflow_cdc_provider.core.workdir import LOCAL_SCHEMES, access_problem, local_path, scheme_of

    location = config.work.dir
    if scheme_of(location) not in LOCAL_SCHEMES:
        try:
            from airflow.sdk import ObjectStoragePath

            ObjectStoragePath(location, conn_id=config.work.conn_id).exists()
        except Exception as exc:  # any store's own error: what it says is the fix's start
            report.add("problem", "work directory", f"{location} cannot be reached: {type(exc).__name__}: {exc}. "
                       "Check the bucket, `work: conn_id:` (an `aws` connection) and its credentials.")
        else:
            report.add("ok", "work directory", f"{location} can be reached")
        return
    path = Path(local_path(location))
    existing = _nearest_existing(path)
    if existing == path:
        found = os.stat(path)
        problem = access_problem(str(path), found.st_mode, found.st_uid, os.geteuid())
        if problem:
            report.add("problem", "work directory", problem)
        else:
            report.add("ok", "work directory", f"{path} is this user's alone")
    elif not os.access(existing, os.W_OK | os.X_OK):
        report.add("problem", "work directory", f"{path} does not exist, and this user cannot make it in {existing}. "
                   f"Make it for the user the tasks run as: install -d -m 700 -o <that user> {path}")
    else:
        report.add("ok", "work directory", f"{path} does not exist yet: the first task makes it, mode 700")


def _spark(config: CdcConfig, report: Report) -> None:
    from airflow.sdk import BaseHook

    from airflow_cdc_provider.compat import AirflowNotFoundException

    conn_id = config.spark.conn_id
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        report.add("problem", "spark", f"The Spark connection {conn_id!r} does not exist. Create it with conn_type "
                   "`spark` and the master as its host (`local[*]` to run on the worker, spark://host:7077, yarn), or "
                   "set `spark: conn_id:` to an existing one.")
        return
    if conn.conn_type != "spark":
        report.add("problem", "spark", f"The connection {conn_id!r} is of conn_type {conn.conn_type!r}, not `spark`: "
                   "give it conn_type `spark` (the Apache Spark provider's), or name another in `spark: conn_id:`.")
        return
    master = conn.host or ""
    if conn.port:
        master = f"{master}:{conn.port}"
    report.add("ok", "spark", f"the connection {conn_id!r} submits to {master or 'yarn'}")
    if master.startswith("spark://"):
        _reachable(report, "spark", master, 7077, "the Spark master")
    submit = shutil.which("spark-submit") or str(Path(sys.executable).with_name("spark-submit"))
    if not os.access(submit, os.X_OK):
        report.add("problem", "spark", "No spark-submit is on PATH, nor beside this Python. Install the provider into "
                   "the Python the tasks run (it brings pyspark's), or put Spark's bin on PATH.")
    else:
        report.add("ok", "spark", f"spark-submit: {submit}")
    if str(conn.extra_dejson.get("deploy-mode", "")).lower() != "cluster":
        _java(report)


def _java(report: Report) -> None:
    """The driver runs here (client mode): it needs Java, as spark-class finds it (JAVA_HOME, else PATH)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    fix = ("Install Java 17 or later (Debian: apt-get install openjdk-17-jre-headless, or the JRE your release has) "
           "and put it on PATH, or set JAVA_HOME.")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java is on PATH"
        report.add("problem", "spark", f"The merge's driver needs Java, and {where}. {fix}")
        return
    try:
        told = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        report.add("problem", "spark", f"{java} -version failed: {exc}. {fix}")
        return
    version = re.search(r'version "(\d+)(?:\.(\d+))?', told.stderr + told.stdout)
    major = int(version.group(1)) if version else 0
    if major == 1 and version and version.group(2):  # 1.8 is Java 8
        major = int(version.group(2))
    if major < JAVA_NEEDED:
        report.add("problem", "spark", f"{java} is Java {major or 'of an unknown version'}; Spark 4 needs "
                   f"{JAVA_NEEDED} or later. {fix}")
    else:
        report.add("ok", "spark", f"Java {major} ({java})")


def _hive(config: CdcConfig, report: Report) -> None:
    uri = config.hive.metastore_uri
    if uri:
        _reachable(report, "hive", uri, 9083, "the Hive metastore")
        return
    warehouse = Path(config.hive.warehouse_dir)
    existing = _nearest_existing(warehouse)
    if not os.access(existing, os.W_OK | os.X_OK):
        report.add("problem", "hive", f"The warehouse {warehouse} (with the embedded metastore in it) cannot be "
                   f"written by this user ({existing} is not writable). Give the tasks' user a directory it owns, "
                   "or set `hive: metastore_uri:` to a metastore service.")
    else:
        report.add("ok", "hive", f"an embedded metastore in {warehouse} (one merge at a time: a metastore service "
                   "lets several run together)")


def _nearest_existing(path: Path) -> Path:
    """``path``, or its nearest parent that exists: where a directory the tasks make would be made."""
    return next(p for p in (path, *path.parents) if p.exists())


def _reachable(report: Report, area: str, uri: str, default_port: int, what: str) -> None:
    parts = urlsplit(uri)
    host, port = parts.hostname or "", parts.port or default_port
    try:
        with socket.create_connection((host, port), timeout=NETWORK_TIMEOUT_SECONDS):
            pass
    except OSError as exc:
        report.add("problem", area, f"{what} at {uri} does not answer ({host}:{port}: {exc}). Start it, or correct "
                   "the address" + (" (`hive: metastore_uri:`)." if area == "hive" else " (the connection's host)."))
    else:
        report.add("ok", area, f"{what} answers at {host}:{port}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_cdc_provider.preflight", description=__doc__.split(
        "\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="+", help="the configuration file(s), as the DAG loads them")
    args = parser.parse_args(argv)
    return run(args.config)


def run(paths: Sequence[str]) -> int:
    from airflow_cdc_provider.configuration import load_config

    failed = False
    for path in paths:
        try:
            config = load_config(path)
        except CdcError as exc:
            report = Report(path)
            report.add("problem", "configuration", str(exc))
        else:
            report = preflight(config, path)
        print("\n".join(report.lines()), flush=True)
        failed = failed or bool(report.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
