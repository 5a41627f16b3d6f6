"""Run one DAG run for real with ``dag.test()``, as ``airflow dags test`` does, but with a stable run id.

    python -m tests.e2e.dag_run <dag_id> <logical date> [<conf JSON>]

``airflow dags test`` names its run after the current time, so running it again makes a different run. Here
the run is named after its logical date: running the same date again replaces the run and its task
instances under the same run id, as clearing the run in the UI does.
"""

from __future__ import annotations

import json
import sys

from airflow.sdk import timezone
from airflow.utils.cli import get_bagged_dag
from airflow.utils.state import DagRunState


def main(argv: list[str]) -> int:
    dag_id, logical = argv[1], timezone.parse(argv[2])
    conf = json.loads(argv[3]) if len(argv) > 3 else None
    dag = get_bagged_dag(bundle_names=None, dag_id=dag_id)
    run = dag.test(logical_date=logical, run_after=logical, run_conf=conf)
    print(f"dag_run {run.run_id} {run.state}")
    return 0 if run.state == DagRunState.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
