"""The source hook: every call to the MySQL or MariaDB server whose binlog is captured."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any

import pymysql
import pymysql.cursors
from airflow.sdk import BaseHook
from pydantic import SecretStr
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication import event as binlog_event
from pymysqlreplication import row_event as binlog_row_event
from pymysqlreplication.packet import BinLogPacketWrapper

from airflow_cdc_provider.core.checksum import (
    kind_of,
    source_bucket_sums,
    source_key_text,
    source_row_text,
    text_hash_sql,
)
from airflow_cdc_provider.core.contract import VerifySlice
from airflow_cdc_provider.core.errors import (
    CaptureNotPossible,
    CdcError,
    TableNotFound,
)
from airflow_cdc_provider.core.flavor import ServerFlavor, detect_flavor
from airflow_cdc_provider.core.foreign_keys import ForeignKeyColumn, hidden_rules, shown_rules, with_rules
from airflow_cdc_provider.core.grants import (
    CaptureGrants,
    Grants,
    excess_privileges,
    missing_capture_privileges,
    missing_source_privileges,
    parse_grants,
    unreadable_tables,
)
from airflow_cdc_provider.core.gtid import (
    GtidFile,
    GtidPositionLost,
    canonical_gtid,
    first_file,
    mysql_gtid_at,
    start_after,
)
from airflow_cdc_provider.core.identifiers import TableName, formatted, quote_identifier
from airflow_cdc_provider.core.keys import IndexColumn, TableKey, choose_key
from airflow_cdc_provider.core.mysql_json import json_text
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.resume import BinlogFacts, BinlogFile, needs_gtid_search
from airflow_cdc_provider.core.schema import UnknownDefault, added_column_default
from airflow_cdc_provider.core.settings import (
    compression_notes,
    compression_variables,
    replica_problems,
    required_settings,
    settings_problems,
)
from airflow_cdc_provider.core.source_connection import SourceLimits, SourceTls, tls_from_extra
from airflow_cdc_provider.core.types import check_columns, json_checked_columns
from airflow_cdc_provider.core.verify import BucketSum, bucket_count, key_range, key_range_condition
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.hooks.reader_processes import ReaderProcess
from airflow_cdc_provider.hooks.source_link import (
    SESSION,
    SourceLink,
    SourceLogin,
    StreamingReads,
    _server_side_cursor,
)


def _exact_json(packet: BinLogPacketWrapper, size: int, is_partial: bool) -> Any:
    """A JSON column's value as the text MySQL prints for it (``core.mysql_json``), in place of the reader's own
    decoding of MySQL's binary JSON, which gets opaque dates, times and decimals and bare-string documents wrong.
    A partial update's diff (``binlog_row_value_options=PARTIAL_JSON``) is left to the reader: the extraction
    stops its table on one (``stages.extract.PartialRowImage``). Undecodable bytes raise ``UndecodableJson``,
    which stops the table alone."""
    if is_partial:
        return _reader_json(packet, size, is_partial)
    return json_text(bytes(packet.read(packet.read_uint_by_size(size))))


# The reader decodes JSON in its packet class, which its stream makes for every event: replaced there, once, for
# every stream of the process (MariaDB's JSON is text, not this format, and never comes here).
_reader_json = BinLogPacketWrapper.read_binary_json
BinLogPacketWrapper.read_binary_json = _exact_json


def _previous_gtids_unread(event: Any, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any,
                           **kwargs: Any) -> None:
    """A file's PREVIOUS_GTIDS event, left unread: the pass needs nothing of it (``core.binlog_events``: it holds
    no change), and the reader cannot read the form MySQL 8.3+ writes once a tagged GTID was ever committed
    (``AssertionError: Result length not requested length``), which failed every range that began at a file's
    start or crossed a rotation. GTID sets are read from the server's statements (``_gtid_file``)."""
    binlog_event.BinLogEvent.__init__(event, from_packet, event_size, table_map, ctl_connection, **kwargs)


binlog_event.PreviousGtidsEvent.__init__ = _previous_gtids_unread

# Every event class the reader has: given as its only_events, none is left out (its default list leaves some out,
# INTVAR_EVENT among them); with filter_non_implemented_events off, events of other types come too.
EVERY_EVENT = sorted({cls for module in (binlog_event, binlog_row_event) for cls in vars(module).values()
                      if isinstance(cls, type) and issubclass(cls, binlog_event.BinLogEvent)}, key=lambda c: c.__name__)


def _table_not_found(table: TableName) -> TableNotFound:
    return TableNotFound(
        f"The table {table} does not exist, or the capture user cannot see it. Check the name "
        f"(schema.table), and that the user has SELECT on it: GRANT SELECT ON {table.quoted} TO <user>;"
    )


DIFF_WAY_ON = ("Or capture without the binlog: `capture: diff` (for every table: `source: capture: diff`; or on a "
               "table's entry) compares each table with its last version's row digests at each run, and needs only "
               "SELECT (docs/sources.md#diff-mode).")


class ConsistentReads:
    """Statements on one connection in one read-only transaction with a consistent snapshot: every read sees the
    source as of one moment (``as_of``, the server's clock read just after the snapshot was taken). Each statement
    runs under the statement time limit."""

    def __init__(self, conn: pymysql.connections.Connection, failures: Callable[[], Any], mariadb: bool) -> None:
        self._conn, self._failures, self.mariadb = conn, failures, mariadb
        with failures(), conn.cursor() as cursor:
            # The session's answers may be packed strings of a few hundred kB (``core.diff``).
            cursor.execute("SET SESSION group_concat_max_len = 16777216")
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cursor.execute("SELECT UTC_TIMESTAMP(6)")
            ((now,),) = cursor.fetchall()
        self.as_of: dt.datetime = now.replace(tzinfo=dt.UTC)

    def binlog_position(self) -> tuple[str, int] | None:
        """The binlog file and position the snapshot reflects exactly: every transaction before it is seen, none
        after. MariaDB tells it (``binlog_snapshot_file`` and ``_position``, for this session's consistent
        snapshot); MySQL does not: None."""
        if not self.mariadb:
            return None
        found = dict(self.query("SHOW SESSION STATUS LIKE %s", ("binlog_snapshot_%",)))
        file, position = found.get("Binlog_snapshot_file"), found.get("Binlog_snapshot_position")
        return (str(file), int(position)) if file and position is not None else None

    def bytes_sent(self) -> int:
        """What the server has sent on this connection so far (its session's ``Bytes_sent``)."""
        ((_, sent),) = self.query("SHOW SESSION STATUS LIKE 'Bytes_sent'", ())
        return int(sent)

    def query(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._failures(), self._conn.cursor() as cursor:
            cursor.execute(sql, list(args))
            return list(cursor.fetchall())

    @contextlib.contextmanager
    def streamed(self, sql: str, args: Sequence[Any]) -> Iterator[pymysql.cursors.SSCursor]:
        """A server-side cursor over ``sql``'s rows, read to the end before the next statement."""
        with self._failures(), _server_side_cursor(self._conn) as cursor:
            cursor.execute(sql, list(args))
            yield cursor


class MySqlSourceHook(BaseHook):
    """Talks to the source server: its flavor, binlog settings, watermark, binlogs and table keys.

    :param mysql_conn_id: Airflow connection of conn_type ``mysql`` (host, port, login, password) for the
        capture user; TLS as its extra says (``ssl``, ``ssl_mode``: ``core.source_connection``).
    :param connect_timeout: seconds to wait for the server to answer a connection.
    :param statement_timeout_seconds: the longest a statement may run on the server (``core.source_connection``).
    :param read_timeout_seconds: the longest the server may stay silent on a connection beyond that.
    """

    conn_name_attr = "mysql_conn_id"
    default_conn_name = "mysql_cdc"
    conn_type = "mysql"
    hook_name = "MySQL binlog source"

    def __init__(self, mysql_conn_id: str = default_conn_name, connect_timeout: int = 10,
                 statement_timeout_seconds: int = 3600, read_timeout_seconds: int = 600) -> None:
        super().__init__()
        self.mysql_conn_id = mysql_conn_id
        self.connect_timeout = connect_timeout
        self.limits = SourceLimits(statement_seconds=statement_timeout_seconds, read_seconds=read_timeout_seconds)

    # --- connection -------------------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """The server's host and port, as the connection names them (no secret: fit for logs and lineage)."""
        return self.login.address

    @property
    def tls(self) -> SourceTls | None:
        """The TLS the connection's extra asks for (None: none)."""
        return self.login.tls

    @cached_property
    def login(self) -> SourceLogin:
        """The capture user's login and TLS. It never leaves the hook but for a snapshot's reader processes
        (``stages.snapshot_readers``), over a pipe. Looked up once per hook: the snapshot's threads share the hook,
        and one lookup serves them all."""
        conn = self.get_connection(self.mysql_conn_id)
        return SourceLogin(conn_id=self.mysql_conn_id, host=conn.host or "localhost", port=int(conn.port or 3306),
                           user=conn.login, password=SecretStr(conn.password or ""),
                           tls=tls_from_extra(conn.extra_dejson, self.mysql_conn_id),
                           connect_timeout=self.connect_timeout, limits=self.limits)

    @cached_property
    def _link(self) -> SourceLink:
        return SourceLink(self.login)

    def _connect(self, read_timeout: int, purpose: str, **settings: Any) -> pymysql.connections.Connection:
        return self._link.connect(read_timeout, purpose, **settings)

    def _failures(self) -> contextlib.AbstractContextManager[None]:
        return self._link.failures()


    def get_conn(self) -> pymysql.connections.Connection:
        """A new connection for statements: its session reads times in UTC, so values do not depend on the server's
        zone, and the server stops a statement at the statement time limit."""
        conn = self._connect(self.limits.answer_seconds, "connection for statements", **SESSION)
        try:
            with self._failures(), conn.cursor() as cursor:
                # The handshake's version names the flavor, which the session setting depends on.
                version = conn.get_server_info()  # type: ignore[no-untyped-call]
                cursor.execute(detect_flavor(version).statement_time_limit(self.limits.statement_seconds))
        except BaseException:
            conn.close()
            raise
        return conn

    @contextlib.contextmanager
    def cursor(self) -> Iterator[pymysql.cursors.Cursor]:
        conn = self.get_conn()
        try:
            with self._failures(), conn.cursor() as cursor:
                yield cursor
        finally:
            conn.close()

    @contextlib.contextmanager
    def consistent_reads(self) -> Iterator[ConsistentReads]:
        """One connection in one read-only transaction with a consistent snapshot (a diff-mode read,
        ``stages.diff``), under the statement time limit; the transaction ends with the connection."""
        conn = self.get_conn()
        try:
            yield ConsistentReads(conn, self._failures, self.flavor.is_mariadb)
        finally:
            conn.close()

    def streaming_reads(self) -> contextlib.AbstractContextManager[StreamingReads]:
        """One connection for reads streamed one after another (``SourceLink.streaming_reads``)."""
        return self._link.streaming_reads()

    def binlog_stream(self, start: Watermark, server_id: int, only_schemas: Collection[str],
                      only_tables: Collection[str]) -> BinLogStreamReader:
        """A reader of the binlog from ``start`` on, as replica ``server_id``, on one replication connection of
        its own (opened when the first event is asked for). It does not block at the end of the log: the caller
        stops it by coordinates (``stages.extract``). Its connections are this hook's (TLS, the login), each
        giving up after the read time limit of silence: the server sends events until the end of the log, so
        silence means it hangs. (The reader reconnects once after a lost connection.)

        The reader tests every table map and row event's schema and table with ``in`` against ``only_schemas``
        and ``only_tables`` (python-mysql-replication 1.0's ``row_event.py``, nothing else): given as frozensets,
        that costs the same for ten thousand tables as for one.

        Every event is handed over, whatever its type (those the reader has no class for as its
        ``NotImplementedEvent``): the pass decides each (``core.binlog_events``). Only the row events and table
        maps of tables not captured are left out, by their names. Compressed events come as the plain events they
        hold (the connection's doing, ``hooks.source_link``)."""
        return BinLogStreamReader(
            # The login and TLS are added by the hook's own connect: the reader never holds the credentials.
            connection_settings={},
            pymysql_wrapper=functools.partial(self._connect, self.limits.read_seconds, "binlog connection"),
            server_id=server_id,
            resume_stream=True,
            log_file=start.file,
            log_pos=start.position,
            blocking=False,
            # File and position are read as MySQL does on MariaDB too: the MariaDB mode re-reads the log forever.
            is_mariadb=False,
            only_events=EVERY_EVENT,
            filter_non_implemented_events=False,
            only_schemas=frozenset(only_schemas),
            only_tables=frozenset(only_tables),
            enable_logging=False,
        )

    def _query(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        with self.cursor() as cursor:
            cursor.execute(sql, args)
            return list(cursor.fetchall())

    # --- server -----------------------------------------------------------------------------------------

    @cached_property
    def flavor(self) -> ServerFlavor:
        ((version, comment),) = self._query("SELECT VERSION(), @@version_comment")
        return detect_flavor(version, comment)

    def global_variables(self, names: Iterable[str]) -> dict[str, Any]:
        """Global values of the named variables; a variable the server does not have maps to None."""
        names = list(names)
        placeholders = ", ".join(["%s"] * len(names))
        rows = self._query(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({placeholders})", names)
        found = {name.lower(): value for name, value in rows}
        return {name: found.get(name.lower()) for name in names}

    def capture_problems(self, tables: Iterable[TableName] = (), binlog: bool = True) -> list[str]:
        """Every reason capture is not possible: binlog settings first, then the capture user's privileges."""
        user, grants = self._grants()
        return self._server_problems(binlog) + missing_capture_privileges(grants, user, list(tables), binlog)

    def check_capture(self, tables: Iterable[TableName] = (), binlog: bool = True) -> CaptureGrants:
        """Raise CaptureNotPossible listing every problem when no table can be captured (the binlog's settings, the
        replication privileges); else return the tables of ``tables`` the capture user may not read, each with its
        fix, and the warnings on privileges it holds beyond what capture needs (``core.grants``). Without
        ``binlog`` (every table in diff mode) neither the binlog settings nor the replication privileges count."""
        user, grants = self._grants()
        problems = self._server_problems(binlog) + missing_source_privileges(grants, user, binlog)
        if problems:  # each is the binlog's: the way on without it
            raise CaptureNotPossible(problems, DIFF_WAY_ON)
        return CaptureGrants(warnings=excess_privileges(grants, user),
                             unreadable=unreadable_tables(grants, user, tables))

    def _server_problems(self, binlog: bool) -> list[str]:
        """The binlog's settings that do not serve, and a replica that does not log what it replicates."""
        if not binlog:
            return []
        variables = self.global_variables(name for name, _, _ in required_settings(self.flavor))
        return settings_problems(variables, self.flavor) + self._replica_problems()

    def _replica_problems(self) -> list[str]:
        """``core.settings.replica_problems`` of this server: whether it replicates, by its replica status (which
        REPLICATION CLIENT shows on MySQL; MariaDB 10.5+ asks REPLICA MONITOR of it, and without that privilege
        the server is taken to be no replica, as its binlog settings are checked all the same)."""
        try:
            is_replica = bool(self._query(self.flavor.replica_status_statement))
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] in (1227, 1045):  # access denied: it cannot be told
                return []
            raise
        variable = self.flavor.replica_logging_variable
        return replica_problems(is_replica, self.global_variables([variable])[variable], self.flavor)

    def binlog_notes(self) -> list[str]:
        """What the binlog's settings that are no problem mean for capture, one sentence each: its compression
        (``core.settings.compression_notes``)."""
        return compression_notes(self.global_variables(compression_variables(self.flavor)), self.flavor)

    def _grants(self) -> tuple[str, Grants]:
        """The capture user as ``'name'@'host'``, and its grants."""
        with self.cursor() as cursor:
            cursor.execute("SELECT CURRENT_USER()")
            user_name, _, user_host = _one(cursor)[0].rpartition("@")
            cursor.execute("SHOW GRANTS")
            grants = parse_grants(row[0] for row in cursor.fetchall())
        return f"'{user_name}'@'{user_host}'", grants

    # --- watermark and binlogs --------------------------------------------------------------------------

    def watermark_at(self, file: str, position: int) -> Watermark:
        """The watermark at a transaction boundary found in the binlog (a data interval's end).

        On MariaDB its GTID state comes from BINLOG_GTID_POS. MySQL has no such function: its GTID set there is
        the file's Previous_gtids with the transactions before the position (``core.gtid.mysql_gtid_at``).
        """
        flavor = self.flavor
        with self.cursor() as cursor:
            if flavor.is_mariadb:
                cursor.execute("SELECT BINLOG_GTID_POS(%s, %s), @@GLOBAL.server_id", (file, position))
                gtid, server_id = _one(cursor)
                server_uuid = None
            else:
                cursor.execute("SELECT @@GLOBAL.server_id, @@GLOBAL.server_uuid, @@GLOBAL.gtid_mode")
                server_id, server_uuid, gtid_mode = _one(cursor)
                gtid = str(mysql_gtid_at(self._gtid_file(cursor.connection, file, until=position), position)) \
                    if str(gtid_mode).upper() == "ON" else None
        return Watermark(file=file, position=position, server_id=int(server_id),
                         gtid=canonical_gtid(gtid, flavor.is_mariadb) if gtid else None, server_uuid=server_uuid)

    def _gtid_file(self, conn: pymysql.connections.Connection, name: str, limit: int | None = None,
                   until: int | None = None) -> GtidFile:
        """A binlog file's GTID state at its start and its transactions' GTIDs, from SHOW BINLOG EVENTS: its first
        ``limit`` events, or those before offset ``until``, or all (streamed: a file holds millions)."""
        mariadb = self.flavor.is_mariadb
        start, events = ("[]" if mariadb else ""), []
        with _server_side_cursor(conn) as cursor:
            cursor.execute("SHOW BINLOG EVENTS IN %s" + (f" LIMIT {int(limit)}" if limit else ""), (name,))
            # Rows: Log_name, Pos, Event_type, Server_id, End_log_pos, Info. Read to the end even after
            # ``until``: the connection serves the next statement.
            for _, offset, kind, _, _, info in cursor:
                if until is not None and offset >= until:
                    continue
                if kind in ("Gtid_list", "Previous_gtids"):
                    start = info
                elif kind.startswith("Gtid"):
                    events.append((int(offset), info))
        return GtidFile.mariadb(name, start, events) if mariadb else GtidFile.mysql(name, start, events)

    def find_gtid_position(self, watermark: Watermark, current: Watermark, files: Sequence[BinlogFile]) -> Watermark:
        """``watermark``, taken on another server before a failover, as a watermark of this one: the same GTID
        position found in this server's binlog (``core.gtid.start_after``); ``current`` when it has nothing newer.

        Raises GtidPositionLost when this server's binlog no longer reaches back to it, or lacks a transaction
        of it.
        """
        position = watermark.gtid_position()
        if position is None or not files:
            return current
        conn = self.get_conn()
        try:
            with self._failures():
                # Where each file begins is in its first few events; only the files from the one holding the
                # position on are read whole.
                first = first_file(position, [(f.name, self._gtid_file(conn, f.name, limit=4).start) for f in files])
                found = start_after(position, [self._gtid_file(conn, f.name) for f in files[first:]])
        finally:
            conn.close()
        return current if found is None else self.watermark_at(*found)

    def current_watermark(self) -> Watermark:
        """The server's binlog position now, with its GTID state and server identity."""
        flavor = self.flavor
        with self.cursor() as cursor:
            cursor.execute(flavor.binlog_status_statement)
            status = cursor.fetchone()
            if status is None:
                raise CaptureNotPossible(
                    [f"{flavor.binlog_status_statement} returned nothing: the binlog is off. Start the server with "
                     "log_bin."]
                )
            columns = [d[0] for d in cursor.description]
            row = dict(zip(columns, status))
            file, position = row["File"], int(row["Position"])
            if flavor.is_mariadb:
                # BINLOG_GTID_POS gives the GTID state at exactly this file and position, so the two agree even
                # while transactions commit between the statements.
                cursor.execute("SELECT BINLOG_GTID_POS(%s, %s), @@GLOBAL.server_id", (file, position))
                gtid, server_id = _one(cursor)
                server_uuid = None
            else:
                gtid = row.get("Executed_Gtid_Set")
                cursor.execute("SELECT @@GLOBAL.server_id, @@GLOBAL.server_uuid")
                server_id, server_uuid = _one(cursor)
        return Watermark(
            file=file,
            position=position,
            server_id=int(server_id),
            gtid=canonical_gtid(gtid, flavor.is_mariadb),
            server_uuid=server_uuid,
        )

    def binlogs(self) -> list[BinlogFile]:
        """The binlog files the server still has, oldest first."""
        return [BinlogFile(row[0], int(row[1])) for row in self._query("SHOW BINARY LOGS")]

    def binlog_facts(self, watermarks: Sequence[Watermark] = ()) -> BinlogFacts:
        """What the server's binlog is now, for ``core.resume`` to decide where each of ``watermarks`` is read from:
        the server's position, its binlog files and retention settings, and for each watermark of another server
        with a GTID position, where that position lies in this server's binlog (or why it cannot be found)."""
        current = self.current_watermark()
        files = tuple(self.binlogs())
        retention = tuple(self.global_variables(self.flavor.retention_variables).items())
        found: dict[Watermark, Watermark | GtidPositionLost] = {}
        for watermark in dict.fromkeys(watermarks):  # tables of a source often share a watermark
            if needs_gtid_search(watermark, current):
                try:
                    found[watermark] = self.find_gtid_position(watermark, current, files)
                except GtidPositionLost as lost:
                    found[watermark] = lost
        return BinlogFacts(current, files, retention, found)

    # --- tables -----------------------------------------------------------------------------------------

    def table_columns(self, table: TableName) -> list[tuple[str, str]]:
        """The table's columns in order, each with its COLUMN_TYPE (``int(10) unsigned``, ``set('a','b')``…)."""
        rows = self._query(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (table.schema, table.table),
        )
        if not rows:
            raise _table_not_found(table)
        json_columns = self._mariadb_json_columns(table) if self.flavor.is_mariadb else set()
        return [(name, "json" if name in json_columns else ctype) for name, ctype in rows]

    def added_column_defaults(self, table: TableName | str, columns: Sequence[str]) -> dict[str, Any]:
        """The values the server gave existing rows for ``columns``, added to ``table`` since: their defaults.

        Raises UnknownDefault for a default that is an expression, or a column no longer in the table.
        """
        name = TableName.parse(str(table))
        rows = self._query(
            "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_DEFAULT, IS_NULLABLE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (name.schema, name.table),
        )
        found = {column.lower(): (column, ctype, default, nullable == "YES")
                 for column, ctype, default, nullable in rows}
        values = {}
        for column in columns:
            if column.lower() not in found:
                raise UnknownDefault(
                    f"The column {column} was added to {name} in the range but is no longer in the table, so the "
                    "value existing rows got cannot be looked up. Trigger a run with fresh_snapshot=true.")
            real, ctype, default, nullable = found[column.lower()]
            values[column] = added_column_default(real, ctype, default, nullable, self.flavor.is_mariadb)
        return values

    def column_charsets(self, table: TableName | str) -> dict[str, str]:
        """The character set of each text, ENUM and SET column of ``table`` now (``latin1``, ``ucs2``…)."""
        name = TableName.parse(str(table))
        rows = self._query(
            "SELECT COLUMN_NAME, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CHARACTER_SET_NAME IS NOT NULL",
            (name.schema, name.table),
        )
        return {column: charset for column, charset in rows}

    def _mariadb_json_columns(self, table: TableName) -> set[str]:
        """MariaDB's JSON is LONGTEXT with a ``json_valid`` check: the check is the only sign of the type."""
        rows = self._query(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
            (table.schema, table.table),
        )
        return json_checked_columns(clause for (clause,) in rows)

    def raw_header(self, table: TableName, declared: Sequence[str] | None = None) -> RawHeader:
        """What the raw, upsert and delete files of ``table`` hold: its columns now, and its key (``declared``: the
        columns its entry's `key:` names).

        Raises UnsupportedType, naming the columns, when a column's type has no Hive mapping.
        """
        columns = self.table_columns(table)
        check_columns(str(table), columns)
        key = self.table_key(table, declared)
        return RawHeader(str(table), tuple(columns), key.columns)

    def base_tables(self, schemas: Iterable[str] | None = None) -> list[TableName]:
        """The base tables the capture user can see (views and system schemas left out), in ``schemas`` or all."""
        sql = ("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
               "AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')")
        args: list[str] = []
        if schemas is not None:
            args = sorted(set(schemas))
            if not args:
                return []
            sql += f" AND TABLE_SCHEMA IN ({', '.join(['%s'] * len(args))})"
        return sorted(TableName(schema, table) for schema, table in self._query(sql, args or None))

    def raw_headers(self, tables: Sequence[TableName], declared: Mapping[TableName, Sequence[str]] | None = None
                    ) -> dict[TableName, RawHeader | CdcError]:
        """``raw_header`` of many tables in a few statements: each table's header, or why it cannot be captured.
        ``declared``: the key a table's entry declares (``key:``), used instead of the table's own."""
        tables = list(dict.fromkeys(tables))
        if not tables:
            return {}
        schemas = sorted({t.schema for t in tables})
        where = f"TABLE_SCHEMA IN ({', '.join(['%s'] * len(schemas))})"
        with self.cursor() as cursor:
            cursor.execute("SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM "
                           f"information_schema.COLUMNS WHERE {where} ORDER BY TABLE_SCHEMA, TABLE_NAME, "
                           "ORDINAL_POSITION", schemas)
            columns: dict[TableName, list[tuple[str, str, bool]]] = {}
            for schema, table, name, ctype, nullable in cursor.fetchall():
                columns.setdefault(TableName(schema, table), []).append((name, ctype, nullable == "YES"))
            cursor.execute("SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE "
                           f"FROM information_schema.STATISTICS WHERE {where}", schemas)
            indexes: dict[TableName, list[IndexColumn]] = {}
            for schema, table, index, seq, column, non_unique in cursor.fetchall():
                indexes.setdefault(TableName(schema, table), []).append(
                    IndexColumn(index, int(seq), column, bool(int(non_unique))))
            json_columns: dict[TableName, set[str]] = {}
            if self.flavor.is_mariadb:
                cursor.execute("SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CHECK_CLAUSE FROM "
                               "information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA IN "
                               f"({', '.join(['%s'] * len(schemas))})", schemas)
                clauses: dict[TableName, list[str]] = {}
                for schema, table, clause in cursor.fetchall():
                    clauses.setdefault(TableName(schema, table), []).append(clause)
                json_columns = {t: json_checked_columns(c) for t, c in clauses.items()}
        headers: dict[TableName, RawHeader | CdcError] = {}
        for table in tables:
            if table not in columns:
                headers[table] = _table_not_found(table)
                continue
            found = json_columns.get(table, set())
            typed = [(name, "json" if name in found else ctype) for name, ctype, _ in columns[table]]
            try:
                check_columns(str(table), typed)
                key = choose_key(table, indexes.get(table, []), {name: null for name, _, null in columns[table]},
                                 (declared or {}).get(table))
            except CdcError as exc:
                headers[table] = exc
                continue
            headers[table] = RawHeader(str(table), tuple(typed), key.columns)
        return headers

    def foreign_key_columns(self, tables: Iterable[TableName]) -> list[ForeignKeyColumn]:
        """The columns of every foreign key whose child is one of ``tables``, with its rules (``core.foreign_keys``):
        one statement under the statement time limit, whatever the number of tables. On MariaDB, which shows a
        key's rules only to a user with a privilege beyond SELECT, the ``SHOW CREATE TABLE`` of each table with such
        a key tells them."""
        tables = set(tables)
        schemas = sorted({t.schema for t in tables})
        if not schemas:
            return []
        listed = ", ".join(["%s"] * len(schemas))
        # Two reads in one statement, each bounded by its own schemas: a join of the two information_schema tables
        # reads REFERENTIAL_CONSTRAINTS of every schema on MariaDB (its EXPLAIN: "Scanned all databases").
        rows = self._query(
            "SELECT 'column', CONSTRAINT_SCHEMA, CONSTRAINT_NAME, TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, "
            "ORDINAL_POSITION, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME, NULL, NULL "
            f"FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA IN ({listed}) "
            "AND REFERENCED_TABLE_NAME IS NOT NULL "
            "UNION ALL SELECT 'rules', CONSTRAINT_SCHEMA, CONSTRAINT_NAME, CONSTRAINT_SCHEMA, TABLE_NAME, NULL, NULL, "
            "NULL, NULL, NULL, UPDATE_RULE, DELETE_RULE FROM information_schema.REFERENTIAL_CONSTRAINTS "
            f"WHERE CONSTRAINT_SCHEMA IN ({listed})",
            [*schemas, *schemas],
        )
        columns, rules = [], {}
        for kind, schema, name, child_schema, child_table, column, position, parent_schema, parent_table, \
                parent_column, on_update, on_delete in rows:
            if kind == "rules":
                rules[(TableName(child_schema, child_table), name)] = (on_update, on_delete)
            else:
                columns.append(ForeignKeyColumn(schema, name, child_schema, child_table, column, int(position),
                                                parent_schema, parent_table, parent_column))
        found = with_rules([c for c in columns if c.child in tables], rules)
        hidden = hidden_rules(found)
        if hidden:
            shown: dict[tuple[TableName, str], tuple[str, str]] = {}
            with self.cursor() as cursor:
                cursor.execute("SET SESSION sql_quote_show_create = 1")  # the names quoted, as shown_rules reads them
                for table in hidden:
                    cursor.execute(f"SHOW CREATE TABLE {table.quoted}")
                    shown.update(shown_rules(table, _one(cursor)[1]))
            found = with_rules(found, shown)
        return found

    def table_key(self, table: TableName, declared: Sequence[str] | None = None) -> TableKey:
        """The key replay and merge use for ``table`` (``declared``: the columns its entry's `key:` names); raises
        NoUsableKey or TableNotFound."""
        with self.cursor() as cursor:
            cursor.execute(
                "SELECT COLUMN_NAME, IS_NULLABLE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (table.schema, table.table),
            )
            nullable = {name: flag == "YES" for name, flag in cursor.fetchall()}
            if not nullable:
                raise _table_not_found(table)
            cursor.execute(
                "SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE FROM information_schema.STATISTICS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (table.schema, table.table),
            )
            index_columns = [IndexColumn(n, int(s), c, bool(int(u))) for n, s, c, u in cursor.fetchall()]
        return choose_key(table, index_columns, nullable, declared)

    # --- verify -----------------------------------------------------------------------------------------

    def bucket_sums(self, header: RawHeader, buckets: int, range_rows: int = 100_000,
                    part: VerifySlice | None = None) -> dict[int, BucketSum]:
        """Each bucket's sums over the table (``core.verify``), read a range of at most ``range_rows`` keys at a time
        in key order: no statement runs long on the server, and each row is summed once. ``part``: the buckets of
        a rolling verify's slice only.

        A one-column integer key is cut into ranges of ``range_rows`` values between its MIN and MAX (two index
        lookups), unless its values are so sparse that this would take more than four statements per range of
        rows; other keys find each range's end first (``LIMIT 1 OFFSET``: the range's keys read in index order)."""
        table = TableName.parse(header.table)
        mariadb = self.flavor.is_mariadb
        keys = ", ".join(quote_identifier(k) for k in header.key)
        sums: dict[int, BucketSum] = {}
        # A slice: its range of keys in every statement, or its buckets.
        bounds, bound_args = key_range_condition(formatted(keys), part)
        modulo = (part.index, part.of) if part is not None and part.key_range is None else None

        def both(where: str) -> str:
            return " AND ".join(f"({w})" for w in (where, bounds) if w)

        def add(cursor: Any, where: str, args: list[Any]) -> None:
            cursor.execute(source_bucket_sums(table.quoted, header.columns, header.key, mariadb, buckets, both(where),
                                              modulo), [*args, *bound_args])
            for bucket, rows, digest in cursor.fetchall():
                sums[int(bucket)] = sums.get(int(bucket), BucketSum(0, 0)).plus(BucketSum(int(rows), int(digest)))

        with self.cursor() as cursor:
            if len(header.key) == 1 and kind_of(dict(header.columns)[header.key[0]]) == "int":
                cursor.execute(f"SELECT MIN({keys}), MAX({keys}) FROM {table.quoted}")
                low, high = _one(cursor)
                if low is None:
                    return sums
                ranges = (int(high) - int(low)) // range_rows + 1
                if ranges <= 4 * (bucket_count(self.estimated_rows(table), range_rows)):
                    key = formatted(keys)
                    first, last = int(low), int(high)
                    if part is not None and part.key_range is not None:  # only the slice's ranges of keys
                        start_at, end_before = part.key_range
                        first = max(first, start_at) if start_at is not None else first
                        last = min(last, end_before - 1) if end_before is not None else last
                    for start in range(first, last + 1, range_rows):
                        add(cursor, f"{key} >= %s AND {key} < %s", [start, start + range_rows])
                    return sums
            after: tuple[Any, ...] | None = None
            while True:
                where, args = key_range(header.key, after, None)
                probe = both(where)
                cursor.execute(formatted(f"SELECT {keys} FROM {table.quoted}") + (f" WHERE {probe}" if probe else "")
                               + formatted(f" ORDER BY {keys}") + f" LIMIT 1 OFFSET {int(range_rows) - 1}",
                               [*args, *bound_args])
                until = cursor.fetchone()
                where, args = key_range(header.key, after, until)
                add(cursor, where, args)
                if until is None:
                    return sums
                after = tuple(until)

    def bucket_rows(self, header: RawHeader, buckets: int, which: Sequence[int],
                    part: VerifySlice | None = None) -> dict[str, str]:
        """The rows of the buckets ``which`` of ``buckets`` (``core.verify``): each row's key text → its text's hash
        (hex); of a slice's range of keys only, when it is one.

        One read of the table, or of the range (a bucket is a hash of the key, which no index serves), shipping only
        those rows."""
        if not which:
            return {}
        table = TableName.parse(header.table)
        key = source_key_text(header.columns, header.key, self.flavor.is_mariadb)
        row = source_row_text(header.columns, self.flavor.is_mariadb)
        listed = ", ".join(str(int(b)) for b in sorted(set(which)))
        with self.cursor() as cursor:
            bounds, bound_args = key_range_condition(formatted(quote_identifier(header.key[0])), part)
            cursor.execute(formatted(f"SELECT {key}, {text_hash_sql(row)} FROM {table.quoted} "
                                     f"WHERE MOD(CRC32({key}), {int(buckets)}) IN ({listed})")
                           + (f" AND {bounds}" if bounds else ""), bound_args)
            return {k: digest for k, digest in cursor.fetchall()}

    def estimated_rows(self, table: TableName | str) -> int:
        """The server's estimate of a table's row count (``information_schema.TABLES``): free, and near enough to
        size verify's buckets."""
        name = table if isinstance(table, TableName) else TableName.parse(table)
        rows = self._query("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                           "TABLE_NAME = %s", (name.schema, name.table))
        return int(rows[0][0] or 0) if rows else 0

    def duplicate_key(self, header: RawHeader) -> tuple[tuple[Any, ...], int] | None:
        """A value of ``header``'s key that more than one row holds, and how many do; None when each row's is its
        own. One grouping of the table on the server (an index on the key serves it), under the statement time
        limit; only the one value found is sent."""
        keys = ", ".join(quote_identifier(k) for k in header.key)
        table = TableName.parse(header.table).quoted
        rows = self._query(f"SELECT {formatted(keys)}, COUNT(*) FROM {formatted(table)} GROUP BY {formatted(keys)} "
                           "HAVING COUNT(*) > 1 LIMIT 1", [])
        return (tuple(rows[0][:-1]), int(rows[0][-1])) if rows else None

    def first_key_bounds(self, header: RawHeader) -> tuple[int, int] | None:
        """MIN and MAX of the key's first column when it is an integer (two lookups in the key's index), or None
        for another key, no key or no rows: the values a snapshot's key ranges are cut from (``core.key_ranges``)."""
        if not header.key or kind_of(dict(header.columns)[header.key[0]]) != "int":
            return None
        key = quote_identifier(header.key[0])
        ((low, high),) = self._query(f"SELECT MIN({key}), MAX({key}) FROM {TableName.parse(header.table).quoted}")
        return (int(low), int(high)) if low is not None else None

    def reader_process(self, work: str, what: str) -> ReaderProcess:
        """A process of its own with one streamed-read connection, doing ``work`` (``module:function``) for each
        order it is asked (``hooks.reader_processes``); ``what`` names it in messages. Close it when done."""
        return ReaderProcess(self.login, work, what)

    def integer_key_bounds(self, header: RawHeader) -> tuple[int, int] | None:
        """MIN and MAX of a one-column integer key (two index lookups), or None for another key or no rows."""
        return self.first_key_bounds(header) if len(header.key) == 1 else None


def _one(cursor: Any) -> tuple[Any, ...]:
    """The one row a statement that always returns a row returned."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError(f"The server returned no row for {cursor._executed!r}, which always returns one.")
    return tuple(row)
