"""The provider's commands in Airflow's CLI (Airflow 3.3+ loads them from the provider's ``cli`` entry):

    airflow cdc preflight path/to/cdc.yaml
    airflow cdc status [--dag ID] [--table NAME] [--database NAME] [--max-lag 1h] [--json]

Earlier Airflows ignore the entry; ``python -m airflow_cdc_provider.preflight`` runs the same everywhere, and
``python -m airflow_cdc_provider.cli status ...`` the status.
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
        ), ActionCommand(
            name="status",
            help="Every table the DAGs capture: current, behind or stopped (and why), its version, lag, last run "
                 "and last verify. Exits with 1 when a table is stopped or behind --max-lag",
            func=lazy_load_command("airflow_cdc_provider.cli.status_command"),
            args=tuple(Arg(flags, **kwargs) for flags, kwargs in STATUS_ARGS),  # type: ignore[no-untyped-call]
        )),
    )]


# (flags, argparse keywords) of ``airflow cdc status``: Airflow's ``Arg`` and the module's own parser take the same.
STATUS_ARGS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--dag",), {"dest": "dag", "metavar": "DAG_ID", "action": "append",
                  "help": "only the tables of this DAG (repeatable)"}),
    (("--table",), {"dest": "table", "metavar": "NAME", "action": "append",
                    "help": "only this table: its source (schema.table) or its Hive table (database.table)"}),
    (("--database",), {"dest": "database", "metavar": "DATABASE", "action": "append",
                       "help": "only the tables of this Hive database (repeatable)"}),
    (("--max-lag",), {"dest": "max_lag", "metavar": "LAG", "default": "1h",
                      "help": "how far behind the source a table may be and still be current: seconds, or a "
                              "number with s, m, h or d (default 1h)"}),
    (("--json",), {"dest": "json", "action": "store_true", "help": "one JSON document, for scripts"}),
]


def status_command(args: Any) -> None:
    from airflow_cdc_provider.overview.command import run

    code = run(dag_ids=args.dag, tables=args.table, databases=args.database, max_lag=args.max_lag, as_json=args.json)
    if code:
        raise SystemExit(code)


def preflight_command(args: Any) -> None:
    from airflow_cdc_provider.preflight import run

    code = run(args.config)
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m airflow_cdc_provider.cli")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status")
    for flags, kwargs in STATUS_ARGS:
        status.add_argument(*flags, **kwargs)
    status_command(parser.parse_args())
