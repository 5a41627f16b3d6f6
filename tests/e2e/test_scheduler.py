"""The chain under a real scheduler (api-server, dag-processor, scheduler with the LocalExecutor): runs made by
the timetable and what each holds, finished runs cleared through the REST API as the UI's Clear does, backfills,
a backfill beside scheduled runs, a scheduler killed mid-run, and merges meeting on the embedded metastore."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from airflow_cdc_provider.core.types import hive_type
from tests.conftest import DAGS
from tests.e2e.deployment import AirflowDeployment
from tests.e2e.test_pipeline import Pipeline

DAG_ID = "cdc_every_minute"
# The example downstream DAG, scheduled on the first configured table's asset (here ods.orders).
DOWNSTREAM_ID = "shop_orders_refreshed"
DAG_FILE = '''
import os
from datetime import datetime, timezone
from pathlib import Path

import yaml
from airflow.sdk import DAG

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.task_groups import cdc_params, cdc_source_group

config = CdcConfig.from_dict(yaml.safe_load(Path(os.environ["CDC_CONFIG"]).read_text()))
with DAG("cdc_every_minute", schedule="*/1 * * * *", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False, max_active_runs=1, params=cdc_params()):
    cdc_source_group(config, group_id="source")
'''


class StatsdListener:
    """A StatsD server on loopback: keeps every metric line it receives (``name:value|type``)."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.5)
        self.port = self.socket.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                self.lines.extend(self.socket.recv(65535).decode().splitlines())
            except TimeoutError:
                continue

    def values(self, name: str) -> list[tuple[float, str]]:
        """Every value received for the metric ``name``, with its type (c, g, ms)."""
        found = []
        for line in list(self.lines):
            metric, _, rest = line.partition(":")
            if metric == name:
                value, kind = rest.split("|")[:2]
                found.append((float(value), kind))
        return found

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()


@pytest.fixture
def scheduled(mariadb, capture_conn, tmp_path) -> Iterator[tuple[AirflowDeployment, Pipeline]]:
    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders", "customers"], retries=1)
    # The customers keep a changelog, daily snapshots and a history: tables of their own, with their own events.
    pipeline.config["tables"][1].update(changelog=True, history={"daily": True, "scd2": True})
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "cdc_every_minute.py").write_text(DAG_FILE)
    (dags / f"{DOWNSTREAM_ID}.py").write_text((DAGS / f"{DOWNSTREAM_ID}.py").read_text())
    statsd = StatsdListener()
    pipeline.statsd, pipeline.lineage = statsd, tmp_path / "lineage.jsonl"
    env = {"CDC_CONFIG": str(pipeline.config_path),
           **{k: v for k, v in pipeline.env.items() if k.startswith("AIRFLOW_CONN_")},
           # Airflow's metrics to the listener, and OpenLineage's events to a file (one JSON event a line).
           "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(pipeline.lineage),
                                                          "append": True}),
           # The simple auth manager, but a user "outsider" may read the downstream DAG alone (the tables page).
           "AIRFLOW__CORE__AUTH_MANAGER": "airflow_cdc_testing.auth.DagAccessAuthManager",
           "CDC_E2E_DAG_ACCESS": json.dumps({"outsider": [DOWNSTREAM_ID]})}
    deployment = AirflowDeployment.start(tmp_path / "airflow", dags, env=env)
    try:
        yield deployment, pipeline
    finally:
        deployment.stop()
        statsd.close()


def finished_runs(airflow: AirflowDeployment) -> list[dict]:
    return [r for r in airflow.api.runs(DAG_ID) if r["state"] in ("success", "failed")]


def test_scheduled_runs_follow_the_source_and_a_cleared_run_leaves_the_table(scheduled):
    airflow, pipeline = scheduled
    airflow.api.wait_for_dag(DAG_ID, timeout=120)
    airflow.api.wait_for_dag(DOWNSTREAM_ID, timeout=120)
    airflow.api.unpause(DOWNSTREAM_ID)
    airflow.api.unpause(DAG_ID)

    # The timetable's first run loads both tables.
    first = airflow.api.wait_for_run(DAG_ID, _next_run(airflow, []), timeout=600)
    assert first["state"] == "success" and first["run_type"] == "scheduled", airflow.log_tails()
    pipeline.assert_all_equal(["orders", "customers"])
    orders_rows = len(pipeline.source("orders"))

    # Cleared after the source changed (as the UI's Clear does): the run redoes nothing it committed. Its plan
    # says so, and its merge leaves every table as it is, whatever the source holds now.
    pipeline.sql("UPDATE {s}.orders SET amount = amount + 100 WHERE order_no = 1001",
                 "DELETE FROM {s}.customers WHERE id = 2")
    changed_at = dt.datetime.now(dt.UTC)
    airflow.api.clear_run(DAG_ID, first["dag_run_id"])
    again = airflow.api.wait_for_run(DAG_ID, first["dag_run_id"], timeout=600)
    assert again["state"] == "success", airflow.log_tails()
    assert "already committed by this run" in airflow.api.task_log(DAG_ID, first["dag_run_id"], "source.plan", 2)
    outcomes = airflow.api.xcom(DAG_ID, first["dag_run_id"], "source.merge", key="outcomes")
    assert sorted((o["hive_table"], o["status"]) for o in outcomes) == [("ods.customers", "nothing"),
                                                                          ("ods.orders", "nothing")]

    # The next run the timetable makes picks the changes up.
    done = [r["dag_run_id"] for r in finished_runs(airflow)]
    later = airflow.api.wait_for_run(DAG_ID, _next_run(airflow, done, after=changed_at), timeout=600)
    assert later["state"] == "success" and later["run_type"] == "scheduled", airflow.log_tails()
    pipeline.assert_all_equal(["orders", "customers"])
    # The runs that ended released their locks (the next minute's run may hold them by now).
    airflow.api.pause(DAG_ID)
    for table in ("orders", "customers"):
        holder = pipeline.ledger(table).holder()
        assert holder is None or holder.run_id not in (first["dag_run_id"], later["dag_run_id"]), holder

    # The downstream DAG ran after each commit of ods.orders, and read each event's extra; the cleared run,
    # which committed nothing, emitted no event and so started nothing.
    commits = _downstream_commits(airflow, versions=2)
    assert [(c["version"], c["mode"], c["source_run_id"]) for c in commits] == [
        (1, "snapshot", first["dag_run_id"]), (2, "incremental", later["dag_run_id"])]
    assert (commits[0]["inserted"], commits[0]["rows"]) == (orders_rows, orders_rows)
    assert (commits[1]["inserted"], commits[1]["updated"], commits[1]["deleted"]) == (0, 2, 0)  # order 1001: 2 lines
    assert commits[1]["watermark"]["file"] and commits[1]["as_of"] > commits[0]["as_of"]
    events = airflow.api.get("/assets/events", **{"asset_id": _asset_id(airflow, "hive://embedded/ods/orders")})
    assert [e["extra"]["version"] for e in events["asset_events"]] == [1, 2]
    # The tables beside ods.customers: an event per commit on its changelog (the rows it added: each customer,
    # then the one delete) and on its history (the rows open after it); on its snapshots only from a run that
    # passed a day's end (the second, if the test straddles midnight).
    customers_rows = len(pipeline.source("customers")) + 1
    changelog = airflow.api.get("/assets/events", **{
        "asset_id": _asset_id(airflow, "hive://embedded/ods/customers_changelog")})["asset_events"]
    assert [(e["extra"]["version"], e["extra"]["rows"]) for e in changelog] == [(1, customers_rows), (2, 1)]
    history = airflow.api.get("/assets/events", **{
        "asset_id": _asset_id(airflow, "hive://embedded/ods/customers_history")})["asset_events"]
    assert [(e["extra"]["version"], e["extra"]["opened"]) for e in history] == [(1, customers_rows),
                                                                                (2, customers_rows - 1)]
    uri = "hive://embedded/ods/customers_snapshots"  # an asset once a day's snapshot gave it an event
    snapshots = [e for a in airflow.api.get("/assets", uri_pattern=uri)["assets"] if a["uri"] == uri
                 for e in airflow.api.get("/assets/events", asset_id=a["id"])["asset_events"]]
    assert [e["extra"]["version"] for e in snapshots] in ([], [2]), snapshots

    # OpenLineage: each merge that committed reported the MySQL tables read and the Hive tables written, with
    # their schemas and each column's source; the cleared run's merge, which wrote nothing, reported no table.
    merges = _lineage_events(pipeline, f"{DAG_ID}.source.merge")
    mysql = "mysql://{}:{}".format(*pipeline.hook.address)
    by_run = {run: [sorted((d["namespace"], d["name"]) for d in e["outputs"]) for e in events]
              for run, events in merges.items()}
    written = [("hive://embedded", f"ods.customers{beside}") for beside in ("", "_changelog", "_history",
                                                                        "_snapshots")]
    written.append(("hive://embedded", "ods.orders"))
    assert by_run[first["dag_run_id"]] == [written, []] and by_run[later["dag_run_id"]] == [written], by_run
    (complete,) = merges[later["dag_run_id"]]
    assert sorted((d["namespace"], d["name"]) for d in complete["inputs"]) == [
        (mysql, f"{pipeline.schema}.customers"), (mysql, f"{pipeline.schema}.orders")]
    orders = next(d for d in complete["outputs"] if d["name"] == "ods.orders")
    fields = {f["name"]: f["type"] for f in orders["facets"]["schema"]["fields"]}
    assert (fields["order_no"], fields["amount"]) == ("bigint", "decimal(12,2)") and "note" in fields, fields
    columns = orders["facets"]["columnLineage"]["fields"]
    assert set(columns) == set(fields)
    assert columns["amount"]["inputFields"] == [{"namespace": mysql, "name": f"{pipeline.schema}.orders",
                                                 "field": "amount",
                                                 "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}]}]
    source = next(d for d in complete["inputs"] if d["name"] == f"{pipeline.schema}.orders")
    source_fields = {f["name"]: f["type"] for f in source["facets"]["schema"]["fields"]}
    assert {name: hive_type(kind) for name, kind in source_fields.items()} == fields, source_fields
    password = json.loads(pipeline.env[f"AIRFLOW_CONN_{pipeline.conn_id.upper()}"])["password"]
    assert password not in pipeline.lineage.read_text()

    # StatsD: each run's rows read per operation, seconds per stage, the lag per table, and the binlog read.
    metrics = pipeline.statsd
    assert metrics.values("airflow.cdc.rows_read.insert.ods.orders")[0] == (orders_rows, "c")
    assert (2, "c") in metrics.values("airflow.cdc.rows_read.update.ods.orders")
    assert {kind for _, kind in metrics.values("airflow.cdc.duration.merge.ods.orders")} == {"ms"}
    assert len(metrics.values("airflow.cdc.duration.replay.ods.orders")) == 1  # the one incremental version
    lags = metrics.values("airflow.cdc.lag_seconds.ods.customers")
    assert lags and all(kind == "g" and 0 <= lag < 600 for lag, kind in lags), lags
    read = metrics.values(f"airflow.cdc.binlog.bytes.{DAG_ID}.source")
    assert read and sum(v for v, _ in read) > 0 and all(kind == "c" for _, kind in read)
    assert sum(v for v, _ in metrics.values(f"airflow.cdc.binlog.events.{DAG_ID}.source")) >= 2  # UPDATE, DELETE

    # What operators see: the status command, the tables page's API as each user may read it, the page in a browser.
    _status_command(airflow, pipeline)
    _tables_api(airflow, pipeline, first["dag_run_id"], later["dag_run_id"])
    _tables_page(airflow, pipeline, later["dag_run_id"])


def _status_command(airflow: AirflowDeployment, pipeline: Pipeline) -> None:
    """``airflow cdc status``: both tables at their ledgers' versions, each behind a lag of a second, and the exit
    code says so (one CLI process: the text form and the current state are the tests' of tests/e2e/status.py)."""
    found = airflow.cli("cdc", "status", "--json", "--dag", DAG_ID, "--max-lag", "1s", check=False)
    assert found.returncode == 1, found.stdout
    rows = {r["kind"]["hive_table"]: r for r in json.loads(found.stdout[found.stdout.index("{\n"):])["tables"]}
    assert set(rows) == {"ods.orders", "ods.customers"}, found.stdout
    for name, row in rows.items():
        committed = pipeline.ledger(name.split(".")[1]).committed()
        assert (row["state"], row["version"], row["kind"]["dag_id"], row["kind"]["group"]) == (
            "behind", committed.version, DAG_ID, "source"), row
        assert row["reason"].endswith("UTC, more than 1 s ago") and 1 <= row["lag_seconds"] < 3600, row
    assert rows["ods.customers"]["kind"]["beside"] == ["ods.customers_changelog", "ods.customers_snapshots",
                                                       "ods.customers_history"]


def _tables_api(airflow: AirflowDeployment, pipeline: Pipeline, first: str, later: str) -> None:
    """The page's API: a login required; a user sees the tables of the DAGs Airflow lets them read, and nothing of
    the others; each table's versions as their commits announced them, a cleared run's included; a run's tables.
    No row value and no credential in any answer."""
    import httpx

    http = httpx.Client(base_url=airflow.api.base_url, timeout=60)
    assert http.get("/cdc/api/tables").status_code == 401
    assert http.get("/cdc/").status_code == 401
    assert http.get("/cdc/api/tables", headers={"Authorization": "Bearer forged"}).status_code in (401, 403)
    admin = {"Authorization": f"Bearer {airflow.api.token()}"}
    outsider = {"Authorization": f"Bearer {_token(airflow, 'outsider')}"}
    assert http.get(f"/api/v2/dags/{DOWNSTREAM_ID}", headers=outsider).status_code == 200, "a user Airflow knows"
    assert http.get(f"/api/v2/dags/{DAG_ID}", headers=outsider).status_code == 403
    assert http.get("/cdc/api/tables", headers=outsider).json()["tables"] == []
    orders = {"dag_id": DAG_ID, "group": "source", "source": f"{pipeline.schema}.orders"}
    assert http.get("/cdc/api/table", params=orders, headers=outsider).status_code == 404
    assert http.get("/cdc/api/run", params={"dag_id": DAG_ID, "run_id": later}, headers=outsider).status_code == 404

    answers = [http.get("/cdc/api/tables", headers=admin), http.get("/cdc/api/table", params=orders, headers=admin),
               http.get("/cdc/api/run", params={"dag_id": DAG_ID, "run_id": later}, headers=admin)]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    tables, detail, run = (a.json() for a in answers)
    assert sorted((r["kind"]["hive_table"], r["state"]) for r in tables["tables"]) == [
        ("ods.customers", "current"), ("ods.orders", "current")], tables
    # The versions: the first run's too, whose outcome its cleared try replaced ("nothing"); newest first.
    assert [(c["version"], c["run_id"], c["mode"]) for c in detail["commits"]] == [
        (2, later, "incremental"), (1, first, "snapshot")], detail["commits"]
    assert detail["commits"][0]["updated"] == 2 and all(c["lag_at_commit"] >= 0 for c in detail["commits"])
    statuses = {p["run_id"]: p["status"] for p in detail["runs"]}
    assert (statuses[first], statuses[later]) == ("nothing", "committed"), statuses
    assert all(p["run_seconds"] > 0 for p in detail["runs"] if p["run_id"] in (first, later)), detail["runs"]
    assert sorted((t["kind"]["hive_table"], t["point"]["status"], t["point"]["version"]) for t in run["tables"]) == [
        ("ods.customers", "committed", 2), ("ods.orders", "committed", 2)], run
    password = json.loads(pipeline.env[f"AIRFLOW_CONN_{pipeline.conn_id.upper()}"])["password"]
    for answer in answers:
        assert password not in answer.text and "ada@example.com" not in answer.text and "London" not in answer.text
    http.close()


def _token(airflow: AirflowDeployment, user: str) -> str:
    """A viewer's token the deployment's api-server accepts."""
    import subprocess
    import sys

    made = subprocess.run([sys.executable, "-m", "airflow_cdc_testing.auth", user, "viewer"], env=airflow.env,
                          capture_output=True, text=True, check=True, timeout=120)
    return made.stdout.strip().splitlines()[-1]


# Where the page's test leaves its screenshots: docs/images with CDC_SCREENSHOTS=docs/images (as they were made).
SCREENSHOTS = os.environ.get("CDC_SCREENSHOTS")


def _tables_page(airflow: AirflowDeployment, pipeline: Pipeline, later: str) -> None:
    """The page in Airflow's UI, in headless chromium: it lists the tables, sorts and filters them, opens a table
    and draws its charts, and shows a run's tables on the run."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tests.e2e.browser import chromium, wait

    shots = Path(SCREENSHOTS) if SCREENSHOTS else pipeline.tmp / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    base = airflow.api.base_url
    with chromium() as driver:
        driver.get(f"{base}/cdc/api/tables")  # refused (no login yet): the origin the cookie is set on
        driver.add_cookie({"name": "_token", "value": airflow.api.token(), "path": "/"})

        def in_frame(url: str) -> None:
            driver.get(url)
            frame = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "iframe"), what=f"the view's frame: {url}")
            driver.switch_to.frame(frame[0])

        def rows() -> list[str]:
            return [r.get_attribute("data-source") for r in driver.find_elements(By.CSS_SELECTOR, "#tables tr.row")]

        in_frame(f"{base}/plugin/cdc-tables")
        wait(driver, lambda d: len(rows()) == 2, what="the two tables listed")
        assert sorted(rows()) == [f"{pipeline.schema}.customers", f"{pipeline.schema}.orders"]
        driver.switch_to.default_content()
        driver.save_screenshot(str(shots / "cdc-tables.png"))
        driver.switch_to.frame(driver.find_element(By.CSS_SELECTOR, "iframe"))
        # Sorted by a click on a column's header, and back the other way by another.
        driver.find_element(By.CSS_SELECTOR, "th[data-column=table]").click()
        assert rows() == sorted(rows())
        driver.find_element(By.CSS_SELECTOR, "th[data-column=table]").click()
        assert rows() == sorted(rows(), reverse=True)
        # Filtered: no table is stopped; by name, one.
        Select(driver.find_element(By.ID, "filter-state")).select_by_value("stopped")
        assert rows() == [] and "No table matches" in driver.find_element(By.ID, "message").text
        Select(driver.find_element(By.ID, "filter-state")).select_by_value("")
        text = driver.find_element(By.ID, "filter-text")
        text.send_keys("orders\n")
        wait(driver, lambda d: rows() == [f"{pipeline.schema}.orders"], what="the table filtered by name")
        # A table's view: its charts drawn, a mark per commit and per run; its versions.
        driver.find_element(By.CSS_SELECTOR, "#tables tr.row").click()
        wait(driver, lambda d: d.find_elements(By.ID, "chart-rows"), what="the table's view")
        assert driver.find_element(By.ID, "table-title").text == f"{pipeline.schema}.orders → ods.orders"
        for chart in ("chart-changes", "chart-lag", "chart-rows", "chart-durations"):
            marks = driver.find_elements(By.CSS_SELECTOR, f"#{chart} .mark")
            assert len(marks) >= 2, (chart, len(marks))
        versions = driver.find_elements(By.CSS_SELECTOR, "#versions tbody tr")
        assert [v.find_element(By.CSS_SELECTOR, "td").text for v in versions] == ["2", "1"]
        driver.switch_to.default_content()
        driver.save_screenshot(str(shots / "cdc-table.png"))
        # On a DAG run: that run's tables, what each did.
        in_frame(f"{base}/dags/{DAG_ID}/runs/{later}/plugin/cdc-run-tables")
        done = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#run-tables tbody tr"), what="the run's tables")
        assert sorted((r.get_attribute("data-source"), r.get_attribute("data-status")) for r in done) == [
            (f"{pipeline.schema}.customers", "committed"), (f"{pipeline.schema}.orders", "committed")]
        driver.switch_to.default_content()
        driver.save_screenshot(str(shots / "cdc-run.png"))


def _next_run(airflow: AirflowDeployment, known: list[str], after: dt.datetime | None = None,
              timeout: float = 240) -> str:
    """The id of the first scheduled run not in ``known`` (whose interval ends after ``after``), once the
    scheduler has made it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in airflow.api.runs(DAG_ID):
            end = dt.datetime.fromisoformat(run["data_interval_end"].replace("Z", "+00:00"))
            if run["dag_run_id"] not in known and run["run_type"] == "scheduled" and (after is None or end > after):
                return run["dag_run_id"]
        time.sleep(1)
    raise AssertionError(f"no new scheduled run of {DAG_ID} within {timeout} s\n{airflow.log_tails()}")


# Two tables of one source in two task groups of one DAG: their merges run at the same moment, on the embedded
# metastore, whose Derby admits one application at a time. Every two minutes: the runs follow each other for as
# long as the test lasts, and each merges the writer's orders (a Spark application, and twenty task processes);
# each step below needs one run, whatever their pace.
INTERVALS_DAG_ID = "cdc_intervals"
INTERVALS_DAG_FILE = '''
import os
from datetime import datetime, timezone
from pathlib import Path

import yaml
from airflow.sdk import DAG

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.task_groups import cdc_params, cdc_table_group

config = CdcConfig.from_dict(yaml.safe_load(Path(os.environ["CDC_CONFIG"]).read_text()))
with DAG("cdc_intervals", schedule="*/2 * * * *", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False, max_active_runs=1, params=cdc_params()):
    for table in config.named_tables():
        cdc_table_group(table, config, group_id=table.source.table)
'''

# A table no run has loaded yet: the timetable fires on New Year's Day only, so nothing but a backfill runs it.
YEARLY_DAG_ID = "cdc_yearly"
YEARLY_DAG_FILE = '''
import os
from pathlib import Path

import yaml
from airflow.sdk import DAG, CronTriggerTimetable

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.task_groups import cdc_params, cdc_source_group

config = CdcConfig.from_dict(yaml.safe_load(Path(os.environ["CDC_CONFIG_YEARLY"]).read_text()))
# No start_date: the timetable then waits for its next trigger instead of running the latest past one.
with DAG("cdc_yearly", schedule=CronTriggerTimetable("0 0 1 1 *", timezone="UTC"), catchup=False,
         max_active_runs=1, params=cdc_params()):
    cdc_source_group(config, group_id="source")
'''


class Writer:
    """Inserts an order every quarter second, noting the moments before and after each commit."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline, self.written = pipeline, []  # (order_no, before, after)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        conn = self.pipeline.server.root_connection()
        try:
            with conn.cursor() as cursor:
                n = 0
                while not self._stop.is_set():
                    n += 1
                    before = dt.datetime.now(dt.UTC)
                    cursor.execute(f"INSERT INTO {self.pipeline.schema}.orders (order_no, line_no, customer_id, "
                                   f"amount) VALUES ({100000 + n}, 1, 1, {n})")
                    conn.commit()
                    self.written.append((100000 + n, before, dt.datetime.now(dt.UTC)))
                    self._stop.wait(0.25)
        finally:
            conn.close()

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _downstream_commits(airflow: AirflowDeployment, versions: int, timeout: float = 180) -> list[dict]:
    """What the downstream DAG's runs read from their triggering events, oldest first, once they hold
    ``versions`` commits and every run has finished."""
    deadline = time.monotonic() + timeout
    commits: list[dict] = []
    while time.monotonic() < deadline:
        runs = sorted(airflow.api.runs(DOWNSTREAM_ID), key=lambda r: r["run_after"])
        if all(r["state"] in ("success", "failed") for r in runs):
            assert all(r["state"] == "success" and r["run_type"] == "asset_triggered" for r in runs), runs
            commits = [c for r in runs for c in airflow.api.xcom(DOWNSTREAM_ID, r["dag_run_id"], "report")]
            if len(commits) >= versions:
                return commits
        time.sleep(2)
    raise AssertionError(f"{DOWNSTREAM_ID} read {commits} within {timeout} s\n{airflow.log_tails()}")


def _lineage_events(pipeline: Pipeline, job: str) -> dict[str, list[dict]]:
    """The OpenLineage COMPLETE events of ``job`` (``dag.task``) in each DAG run (one per time the task ran), by
    run id, from the transport's file."""
    found: dict[str, list[dict]] = {}
    for line in pipeline.lineage.read_text().splitlines():
        event = json.loads(line)
        if event.get("eventType") == "COMPLETE" and event.get("job", {}).get("name") == job:
            found.setdefault(event["run"]["facets"]["airflow"]["dagRun"]["run_id"], []).append(event)
    return found


def _asset_id(airflow: AirflowDeployment, uri: str) -> int:
    (asset,) = [a for a in airflow.api.get("/assets", uri_pattern=uri)["assets"] if a["uri"] == uri]
    return asset["id"]


def _when(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _written_orders(location: str) -> set[int]:
    """The order numbers the writer made that a version directory holds."""
    import pyarrow.parquet as pq

    path = location.removeprefix("file:")
    numbers = pq.read_table(path, columns=["order_no"]).column("order_no").to_pylist()
    return {n for n in numbers if n > 100000}


def _outcome(airflow: AirflowDeployment, run_id: str, table: str) -> dict:
    (outcome,) = airflow.api.xcom(INTERVALS_DAG_ID, run_id, f"{table}.merge", key="outcomes")
    return outcome


@pytest.fixture
def intervals(mariadb, capture_conn, tmp_path) -> Iterator[tuple[AirflowDeployment, Pipeline]]:
    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders", "customers"], retries=1)
    pipeline.sql("CREATE TABLE {s}.products (sku VARCHAR(20) PRIMARY KEY, title VARCHAR(100), price DECIMAL(8,2))",
                 "INSERT INTO {s}.products VALUES ('a-1', 'Anvil', 99.50), ('b-2', 'Bell', 3.20)")
    pipeline.config["keep_versions"] = 20  # every version a run committed stays readable for the checks
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    yearly = {**pipeline.config, "tables": [{"source": f"{pipeline.schema}.products", "target": "products"}]}
    (tmp_path / "yearly.yaml").write_text(yaml.safe_dump(yearly))
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "cdc_intervals.py").write_text(INTERVALS_DAG_FILE)
    (dags / "cdc_yearly.py").write_text(YEARLY_DAG_FILE)
    env = {"CDC_CONFIG": str(pipeline.config_path), "CDC_CONFIG_YEARLY": str(tmp_path / "yearly.yaml"),
           **{k: v for k, v in pipeline.env.items() if k.startswith("AIRFLOW_CONN_")}}
    deployment = AirflowDeployment.start(tmp_path / "airflow", dags, env=env)
    try:
        yield deployment, pipeline
    finally:
        deployment.stop()


def test_intervals_backfills_a_killed_scheduler_and_concurrent_runs(intervals):
    airflow, pipeline = intervals
    for dag_id in (INTERVALS_DAG_ID, YEARLY_DAG_ID):
        airflow.api.wait_for_dag(dag_id, timeout=120)
    airflow.api.unpause(YEARLY_DAG_ID)

    # A backfill of a table never loaded: its oldest interval loads it once, the later ones find it loaded.
    # Created before the intervals DAG starts, so the scheduler is not writing its first run at the same moment.
    airflow.backfill(YEARLY_DAG_ID, "2025-01-01", "2026-01-01", max_active_runs=1)
    airflow.api.unpause(INTERVALS_DAG_ID)

    with Writer(pipeline) as writer:
        # A scheduled run after the first load holds exactly the orders committed before its data interval end
        # (binlog times have whole seconds: a second either side is left out of the check).
        runs, checked = [], 0
        while checked < 1:
            run_id = _next_interval_run(airflow, [r["dag_run_id"] for r in runs])
            run = airflow.api.wait_for_run(INTERVALS_DAG_ID, run_id, timeout=600)
            assert run["state"] == "success", airflow.log_tails()
            runs.append(run)
            orders = _outcome(airflow, run_id, "orders")
            if orders["mode"] != "incremental":
                continue
            assert orders["status"] == "committed", orders
            end = _when(run["data_interval_end"])
            held = _written_orders(orders["location"])
            before = {n for n, _, after in writer.written if after < end - dt.timedelta(seconds=1.5)}
            since = {n for n, at, _ in writer.written if at > end + dt.timedelta(seconds=1.5)}
            assert before <= held, f"run {run_id} misses orders written before {end}: {sorted(before - held)[:5]}"
            assert not since & held, f"run {run_id} holds orders written after {end}: {sorted(since & held)[:5]}"
            checked += 1
        # The two merges of a run met on the embedded metastore: one waited for the other, neither failed.
        waited = [r for r in runs for table in ("orders", "customers")
                  if "Waiting for the embedded metastore" in airflow.api.task_log(
                      INTERVALS_DAG_ID, r["dag_run_id"], f"{table}.merge", 1)]
        assert waited, "no two merges ever met: the test shows nothing about the metastore's turn"

        # A run older than the last committed one, cleared: it redoes nothing, and the table does not go back. (The
        # one that committed before it: a run between them may have found the table past its interval already.)
        latest = _outcome(airflow, runs[-1]["dag_run_id"], "orders")
        older = next(r["dag_run_id"] for r in reversed(runs[:-1])
                     if _outcome(airflow, r["dag_run_id"], "orders")["status"] == "committed")
        airflow.api.clear_run(INTERVALS_DAG_ID, older)
        cleared = airflow.api.wait_for_run(INTERVALS_DAG_ID, older, timeout=600)
        assert cleared["state"] == "success", airflow.log_tails()
        assert _outcome(airflow, older, "orders")["status"] == "nothing"
        assert "already committed by this run" in airflow.api.task_log(INTERVALS_DAG_ID, older, "orders.plan", 2)
        assert pipeline.ledger("orders").committed().version >= latest["version"]

        # While a scheduled run holds the tables, a backfill of intervals before the first run: each of its runs
        # is refused clearly or finds the tables already past its interval; none changes them.
        busy = _run_in_merge(airflow, [r["dag_run_id"] for r in runs] + [older])
        first_end = _when(runs[0]["data_interval_end"])
        airflow.backfill(INTERVALS_DAG_ID, first_end - dt.timedelta(minutes=6), first_end - dt.timedelta(minutes=4),
                         max_active_runs=2)

        # The scheduler killed (with its tasks, as a lost machine would) in the middle of that run's merge.
        airflow.kill_scheduler(with_tasks=True)
        airflow.start_scheduler()
        killed = airflow.api.wait_for_run(INTERVALS_DAG_ID, busy, timeout=900)
        assert killed["state"] in ("success", "failed"), killed
        backfilled = airflow.api.wait_for_backfills(INTERVALS_DAG_ID, timeout=900)
        assert len(backfilled) >= 2, backfilled
        for run in backfilled:
            tasks = {t["task_id"]: t for t in airflow.api.task_instances(INTERVALS_DAG_ID, run["dag_run_id"])}
            # Each table of the run on its own (one group per table): refused, or found past the interval.
            failed = []
            for table in ("orders", "customers"):
                tries = tasks[f"{table}.plan"]["try_number"]
                plan_logs = [airflow.api.task_log(INTERVALS_DAG_ID, run["dag_run_id"], f"{table}.plan", n)
                             for n in range(1, tries + 1)]
                refused = ["is being updated by run" in log and "this run changed nothing" in log
                           for log in plan_logs]
                if tasks[f"{table}.plan"]["state"] == "failed":
                    failed.append(table)
                    assert refused[-1], plan_logs[-1]
                    # Its summary ran all the same, and said there was no outcome (the merge had no plan).
                    assert tasks[f"{table}.summary"]["state"] == "success", tasks
                else:
                    # Found the table past its interval. An earlier try may have been refused and then lost with
                    # the killed scheduler before its failure was recorded: the task was retried, never the
                    # refusal undone.
                    assert "already committed: version" in plan_logs[-1], plan_logs[-1]
                    assert _outcome(airflow, run["dag_run_id"], table)["status"] == "nothing"
                for log, was_refused in zip(plan_logs[:-1], refused[:-1]):
                    assert was_refused or "already committed" not in log, log
            assert run["state"] == ("failed" if failed else "success"), (run, failed)

    # With the writer stopped, the next scheduled run brings both tables level with the source: no lock stuck.
    stopped = dt.datetime.now(dt.UTC)
    known = [r["dag_run_id"] for r in airflow.api.runs(INTERVALS_DAG_ID)]
    last = airflow.api.wait_for_run(INTERVALS_DAG_ID, _next_interval_run(airflow, known, after=stopped), timeout=900)
    assert last["state"] == "success", airflow.log_tails()
    airflow.api.pause(INTERVALS_DAG_ID)
    ended = {r["dag_run_id"] for r in airflow.api.runs(INTERVALS_DAG_ID) if r["state"] in ("success", "failed")}
    yearly = airflow.api.wait_for_backfills(YEARLY_DAG_ID, timeout=600)
    # Every table level with the source (the yearly DAG's too): one Spark read for the three.
    pipeline.assert_all_equal(["orders", "customers", "products"])
    for table in ("orders", "customers"):
        holder = pipeline.ledger(table).holder()  # the next scheduled run may hold it by now, no run that ended
        assert holder is None or holder.run_id not in ended, holder

    # The yearly backfill: the oldest interval loaded the table, the one after it left it as it was.
    assert [r["state"] for r in yearly] == ["success"] * 2, yearly
    modes = [airflow.api.xcom(YEARLY_DAG_ID, r["dag_run_id"], "source.merge", key="outcomes")[0]["status"]
             for r in yearly]
    assert modes == ["committed", "nothing"], modes
    assert "already committed" in airflow.api.task_log(YEARLY_DAG_ID, yearly[-1]["dag_run_id"], "source.plan", 1)


def _next_interval_run(airflow: AirflowDeployment, known: list[str], after: dt.datetime | None = None,
                       timeout: float = 420) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in airflow.api.runs(INTERVALS_DAG_ID):
            if (run["dag_run_id"] not in known and run["run_type"] == "scheduled"
                    and (after is None or _when(run["data_interval_end"]) > after)):
                return run["dag_run_id"]
        time.sleep(1)
    raise AssertionError(f"no new scheduled run of {INTERVALS_DAG_ID} within {timeout} s\n{airflow.log_tails()}")


def _run_in_merge(airflow: AirflowDeployment, known: list[str], timeout: float = 600) -> str:
    """The first scheduled run not in ``known`` caught while its orders.merge is running. A run that got past its
    merge before it was looked at (the scheduler ran it while the test waited for another) is passed over."""
    deadline = time.monotonic() + timeout
    passed: list[str] = []
    while time.monotonic() < deadline:
        run_id = _next_interval_run(airflow, known + passed)
        while time.monotonic() < deadline:
            states = {t["task_id"]: t["state"] for t in airflow.api.task_instances(INTERVALS_DAG_ID, run_id)}
            if states.get("orders.merge") == "running":
                return run_id
            if states.get("orders.merge") in ("success", "failed", "upstream_failed", "skipped"):
                passed.append(run_id)
                break
            time.sleep(0.5)
    raise AssertionError(f"no scheduled run was caught in its merge within {timeout} s (passed over: {passed})\n"
                         f"{airflow.log_tails()}")
