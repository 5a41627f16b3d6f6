"""The provider's commands in Airflow's CLI (Airflow 3.3+ loads them from the provider's ``cli`` entry):

    airflow cdc preflight path/to/cdc.yaml

Earlier Airflows ignore the entry; ``python -m airflow_cdc_provider.preflight`` runs the same everywhere.
"""

from __future__ import annotations

from typing import Any


def get_cli_commands() -> list[Any]:
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command

    return [GroupCommand(
        name="cdc",
        help="MySQL binlog to Hive (airflow-cdc-provider)",
        subcommands=(ActionCommand(
            name="preflight",
            help="Check a configuration's source, tables, work directory, Spark and Hive before the first load",
            func=lazy_load_command("airflow_cdc_provider.cli.preflight_command"),
            args=(Arg(("config",), nargs="+",  # type: ignore[no-untyped-call]
                      help="the configuration file(s), as the DAG loads them"),),
        ),),
    )]


def preflight_command(args: Any) -> None:
    from airflow_cdc_provider.preflight import run

    code = run(args.config)
    if code:
        raise SystemExit(code)
