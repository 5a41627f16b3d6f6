"""Which server we talk to, and the statements that differ between MySQL 8.0, MySQL 8.4+ and MariaDB."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from airflow_cdc_provider.core.errors import UnsupportedServer


class Flavor(Enum):
    MYSQL_8_0 = "MySQL 8.0"
    MYSQL_8_4 = "MySQL 8.4+"
    MARIADB = "MariaDB"


# binlog_row_metadata, which names the columns of every row event, exists from MySQL 8.0.1 and MariaDB 10.5.
_MINIMUM = {"mysql": (8, 0, 1), "mariadb": (10, 5, 0)}
# A statement stopped by that limit: MariaDB's ER_STATEMENT_TIMEOUT, MySQL's ER_QUERY_TIMEOUT.
STATEMENT_TIMEOUT_ERRORS = frozenset({1969, 3024})
_VERSION = re.compile(r"^(?:5\.5\.5-)?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class ServerFlavor:
    """A server's product and version, and the statements to use with it."""

    flavor: Flavor
    version: tuple[int, int, int]

    @property
    def is_mariadb(self) -> bool:
        return self.flavor is Flavor.MARIADB

    @property
    def binlog_status_statement(self) -> str:
        # MySQL 8.4 removed SHOW MASTER STATUS; MariaDB never had SHOW BINARY LOG STATUS.
        return "SHOW BINARY LOG STATUS" if self.flavor is Flavor.MYSQL_8_4 else "SHOW MASTER STATUS"

    @property
    def replica_status_statement(self) -> str:
        # MySQL 8.0.22 renamed SHOW SLAVE STATUS; MariaDB keeps the old name (and its alias SHOW REPLICA STATUS
        # only from 10.5.1).
        return "SHOW SLAVE STATUS" if self.is_mariadb or self.version < (8, 0, 22) else "SHOW REPLICA STATUS"

    @property
    def replica_logging_variable(self) -> str:
        """The variable that makes a replica write what it replicates to its own binlog: MySQL 8.0.26+'s name,
        else the older one MariaDB keeps."""
        return "log_slave_updates" if self.is_mariadb or self.version < (8, 0, 26) else "log_replica_updates"

    @property
    def gtid_variable(self) -> str:
        # MariaDB's gtid_binlog_pos is the last GTID written to the binlog per domain (domain-server-seq);
        # MySQL's gtid_executed is the set of every transaction the server has applied (uuid:interval sets).
        return "gtid_binlog_pos" if self.is_mariadb else "gtid_executed"

    @property
    def retention_variables(self) -> tuple[str, ...]:
        """Server variables that decide how long binlogs are kept, named in errors about purged files."""
        if self.is_mariadb:
            return ("binlog_expire_logs_seconds", "expire_logs_days")
        return ("binlog_expire_logs_seconds",)

    def statement_time_limit(self, seconds: int) -> str:
        """The statement that makes the server stop a statement of this session that has run ``seconds``.

        MariaDB's ``max_statement_time`` (seconds) applies to every statement; MySQL's ``max_execution_time``
        (milliseconds) to read-only SELECTs only, which are all the statements that can run long here (the rest
        are SHOW statements, bounded by the connection's read timeout).
        """
        if int(seconds) < 1:
            raise ValueError(f"A statement time limit is a whole number of seconds, at least 1, not {seconds!r}.")
        if self.is_mariadb:
            return f"SET SESSION max_statement_time = {int(seconds)}"
        return f"SET SESSION max_execution_time = {int(seconds) * 1000}"

    def __str__(self) -> str:
        return f"{self.flavor.value} ({'.'.join(map(str, self.version))})"


def detect_flavor(version: str, version_comment: str = "") -> ServerFlavor:
    """Detect the flavor from ``SELECT VERSION()`` (and ``@@version_comment``), refusing what cannot be captured."""
    match = _VERSION.match(version or "")
    if not match:
        raise UnsupportedServer(
            f"Cannot read the server version {version!r}: expected a MySQL or MariaDB version such as 8.0.36 "
            "or 10.11.6-MariaDB."
        )
    numbers = (int(match[1]), int(match[2]), int(match[3]))
    is_mariadb = "mariadb" in f"{version} {version_comment}".lower()
    product = "mariadb" if is_mariadb else "mysql"
    minimum = _MINIMUM[product]
    if numbers < minimum:
        raise UnsupportedServer(
            f"{'MariaDB' if is_mariadb else 'MySQL'} {'.'.join(map(str, numbers))} is too old: capture needs "
            f"binlog_row_metadata=FULL, which exists from version {'.'.join(map(str, minimum))}. Upgrade the server."
        )
    if is_mariadb:
        return ServerFlavor(Flavor.MARIADB, numbers)
    return ServerFlavor(Flavor.MYSQL_8_4 if numbers >= (8, 4, 0) else Flavor.MYSQL_8_0, numbers)
