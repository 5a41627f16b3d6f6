"""The configuration reaches the tasks the factories build: settings a deployment sets, down to the spark-submit
command line the Spark provider's own hook builds."""

import json

import yaml
from airflow.sdk import DAG

from airflow_cdc_provider.task_groups import cdc_params, cdc_source_group
from tests.conftest import read_config
from tests.unit.test_config import SECTIONED


def test_the_configurations_settings_reach_the_tasks_and_the_submit_command(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    config = read_config(yaml.safe_load(SECTIONED), "cdc.yaml")
    with DAG("cdc_settings", schedule=None, params=cdc_params()) as dag:
        cdc_source_group(config)
    tasks = {t.task_id: t for t in dag.tasks}
    snapshot, replay = tasks["cdc.snapshot"], tasks["cdc.replay"]
    reads = snapshot.settings
    assert (reads.concurrency, reads.chunk_rows, reads.progress_seconds) == (2, 20000, 30.0)
    assert replay.memory_budget == 256 * 1024 * 1024
    # The source's time limits reach every task that talks to it, and its hook.
    for name in ("check", "plan", "snapshot", "extract", "verify"):
        limits = tasks[f"cdc.{name}"]._source_hook().limits
        assert (limits.statement_seconds, limits.read_seconds) == (900, 120), name
    merge, verify = tasks["cdc.merge"], tasks["cdc.verify"]
    assert merge.conf == config.spark.merge_settings() and verify.conf == config.spark.verify_settings()
    assert not merge.spark.class_archive and not verify.spark.class_archive
    assert (merge.settings.keep_versions, merge.settings.applications, merge.retries) == (5, 2, 3)
    command = merge._get_hook()._build_spark_submit_command("merge_job.py")
    assert command[:3] == ["spark-submit", "--master", "yarn"]
    for setting in ("spark.executor.memory=4g", "spark.executor.instances=6", "spark.sql.adaptive.enabled=true"):
        assert command[command.index(setting) - 1] == "--conf"
    assert "spark.executor.memory=2g" in verify._get_hook()._build_spark_submit_command("verify_job.py")
    assert tasks["cdc.plan"].run.allow_reread is False  # the reread parameter: refused unless `run: allow_reread: true`
    allowing = config.model_copy(update={"run": config.run.model_copy(update={"allow_reread": True})})
    with DAG("cdc_reread", schedule=None, params=cdc_params()) as dag:
        cdc_source_group(allowing)
    assert {t.task_id: t for t in dag.tasks}["cdc.plan"].run.allow_reread is True


def test_a_tables_spark_conf_travels_from_the_check_to_the_merge_job_file():
    from airflow_cdc_provider.core.merge import MergeSpec, merge_spec
    from tests.unit.test_contract import merge_input, table_plan

    plan = table_plan()
    settings = (("spark.sql.shuffle.partitions", "64"),)
    plan = plan.model_copy(update={"table": plan.table.model_copy(update={"spark_conf": settings})})
    spec = merge_spec(type(plan).model_validate(plan.to_xcom()), merge_input(), "/wh", None, 3)
    assert spec.spark_conf == settings and MergeSpec.from_text(spec.to_text()) == spec
