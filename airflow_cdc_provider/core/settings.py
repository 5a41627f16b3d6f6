"""The server settings that a correct row-based capture depends on, and the fix for each."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_cdc_provider.core.flavor import ServerFlavor

# (variable, required value, why it matters)
REQUIRED_SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("log_bin", "ON", "without a binlog there are no changes to read"),
    ("binlog_format", "ROW", "STATEMENT and MIXED log SQL text instead of the changed rows"),
    ("binlog_row_image", "FULL", "MINIMAL and NOBLOB images leave out column values that the table copy needs"),
    ("binlog_row_metadata", "FULL", "without it row events carry no column names, so they cannot be decoded by name"),
)


# MySQL only (MariaDB has no such variable): with PARTIAL_JSON, an UPDATE of a JSON column logs the change to
# the document, not the document, and the copy cannot be rebuilt from it.
MYSQL_SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("binlog_row_value_options", "", "PARTIAL_JSON logs only the changed part of a JSON document, not its value"),
)


def replica_problems(is_replica: bool, logs_updates: object, flavor: ServerFlavor) -> list[str]:
    """A replica that does not log what it replicates: its binlog lacks every change that came from its source, so
    a copy read from it would miss them; empty otherwise. ``logs_updates``: the global value of
    ``flavor.replica_logging_variable``."""
    if not is_replica or _normalise("log_bin", logs_updates) == "ON":
        return []
    variable = flavor.replica_logging_variable
    config_file = "my.cnf under [mariadbd]" if flavor.is_mariadb else "my.cnf under [mysqld]"
    return [f"The server is a replica, and its setting {variable} is {logs_updates!r}: the changes it replicates are "
            f"not in its binlog, so the copy would miss them. Fix: add {variable}=ON to {config_file} and restart "
            "the replica (or capture from its source)."]


def required_settings(flavor: ServerFlavor) -> tuple[tuple[str, str, str], ...]:
    """The settings capture needs on this server: REQUIRED_SETTINGS, and MYSQL_SETTINGS on MySQL."""
    return REQUIRED_SETTINGS if flavor.is_mariadb else REQUIRED_SETTINGS + MYSQL_SETTINGS


def _normalise(variable: str, value: object) -> str:
    text = "" if value is None else str(value).strip().upper()
    if variable == "log_bin":  # MariaDB reports 1/0, MySQL ON/OFF
        return {"1": "ON", "0": "OFF"}.get(text, text)
    return text


def settings_problems(variables: Mapping[str, object], flavor: ServerFlavor) -> list[str]:
    """The problems, one sentence each, with the server's binlog settings; empty when capture is possible.

    ``variables`` maps each name in ``required_settings(flavor)`` to the server's global value (None when it is
    unknown).
    """
    problems = []
    config_file = "my.cnf under [mariadbd]" if flavor.is_mariadb else "my.cnf under [mysqld]"
    for variable, required, why in required_settings(flavor):
        value = variables.get(variable)
        if _normalise(variable, value) == required:
            continue
        if variable == "log_bin":
            fix = f"start the server with log_bin (add log_bin=binlog to {config_file}) and restart it"
        elif flavor.is_mariadb:
            fix = (
                f"SET GLOBAL {variable}='{required}' and add {variable}={required} to {config_file} "
                "(sessions opened before the change keep the old value)"
            )
        else:
            fix = f"SET PERSIST {variable}='{required}' (sessions opened before the change keep the old value)"
        problems.append(f"The server setting {variable} is {value!r}, but capture needs {required}: {why}. Fix: {fix}.")
    return problems


# Binlog compression is no problem, as compressed events are decoded; what it is set to is told all the same, so that
# a person reading the check's log or the pre-flight knows what the binlog holds. (variable, what ON does)
_COMPRESSION = {
    True: ("log_bin_compress", "the server compresses each binlog event of log_bin_compress_min_len bytes or more "
                               "(zlib)"),
    False: ("binlog_transaction_compression", "the server writes each transaction to the binlog as one compressed "
                                              "payload event (zstd, MySQL 8.0.20+)"),
}


def compression_variables(flavor: ServerFlavor) -> tuple[str, ...]:
    """The variable that compresses this server's binlog: MariaDB's log_bin_compress, MySQL's
    binlog_transaction_compression."""
    return (_COMPRESSION[flavor.is_mariadb][0],)


def compression_notes(variables: Mapping[str, object], flavor: ServerFlavor) -> list[str]:
    """What the server's binlog compression is set to and what it means for capture, one sentence a variable of
    ``compression_variables(flavor)`` (``variables``: its global value, None when the server lacks it)."""
    notes: list[str] = []
    on = _COMPRESSION[flavor.is_mariadb][1]
    for variable in compression_variables(flavor):
        value = variables.get(variable)
        if value is None:
            notes.append(f"The server setting {variable} is absent (this version has none): its binlog events are not "
                         "compressed.")
            continue
        text = str(value).strip().upper()
        if {"1": "ON", "0": "OFF"}.get(text, text) == "ON":
            notes.append(f"The server setting {variable} is ON: {on}; compressed events are decoded, so capture "
                         "reads them as it reads the others.")
        else:
            notes.append(f"The server setting {variable} is {value!r}: the binlog's events are not compressed "
                         "(were it ON, compressed events are decoded).")
    return notes
