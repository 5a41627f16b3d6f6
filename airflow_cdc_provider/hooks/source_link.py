"""Connections to the source, without Airflow: the capture user's login as one value, and what opens a connection
with it (TLS, time limits, failures that say what happened).

The hook (``hooks.mysql_source``) builds the login from its Airflow connection; a snapshot's reader processes
(``stages.snapshot_readers``) get it over a pipe from the task, and so open the same connections without
importing Airflow or asking it for the connection again.
"""

from __future__ import annotations

import contextlib
import ssl
from collections import deque
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

import pymysql
import pymysql.cursors
from pydantic import SecretStr, SerializationInfo, field_serializer
from pymysql.constants import CLIENT, COMMAND
from pymysql.protocol import MysqlPacket

from airflow_cdc_provider.core.binlog_events import COMPRESSED, FORMAT_DESCRIPTION, HEADER, StreamFormat, uncompressed
from airflow_cdc_provider.core.errors import AccessDenied, SourceTimedOut, StatementTimedOut, TlsNotPossible
from airflow_cdc_provider.core.flavor import STATEMENT_TIMEOUT_ERRORS
from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.core.source_connection import DOC as TLS_DOC
from airflow_cdc_provider.core.source_connection import InvalidTlsSettings, SourceLimits, SourceTls

# The session of every connection that reads tables: times in UTC, so values do not depend on the server's zone.
SESSION: dict[str, Any] = {"autocommit": True, "charset": "utf8mb4",
                            "init_command": "SET SESSION time_zone = '+00:00'"}

# A login refused because the connection is not encrypted: MySQL's ER_SECURE_TRANSPORT_REQUIRED.
_TLS_REQUIRED = frozenset({3159})

# Errors of a login the server refuses for good: access denied (1045, 1044, 1698), password expired (1862),
# account locked (MySQL 3118, MariaDB 4151).
_LOGIN_REFUSED = frozenset({1044, 1045, 1698, 1862, 3118, 4151})





class SourceLogin(Model):
    """The capture user's login and the connection's settings, from its Airflow connection. The password is a
    secret: no repr, log or error shows it; it crosses only the pipe to a snapshot's reader processes."""

    conn_id: str
    host: str
    port: int
    user: str | None
    password: SecretStr
    tls: SourceTls | None
    connect_timeout: int
    limits: SourceLimits

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @field_serializer("password")
    def _password(self, value: SecretStr, info: SerializationInfo) -> str:
        # In clear only for the pipe to a reader process (``hooks.reader_processes``), which asks for it.
        return value.get_secret_value() if (info.context or {}).get("reveal") else str(value)


class SourceLink:
    """Opens connections with a login: every connection to the source goes through ``connect``."""

    def __init__(self, login: SourceLogin) -> None:
        self.login = login

    @cached_property
    def _tls_context(self) -> ssl.SSLContext | None:
        # Made when the first connection is opened (reading the CA's file), not when the address is asked for.
        tls = self.login.tls
        return _ssl_context(tls, self.login.conn_id) if tls is not None and tls.used else None

    def connect(self, read_timeout: int, purpose: str, **settings: Any) -> pymysql.connections.Connection:
        """Every connection to the source: the capture user's login, TLS as the connection says, reads and writes
        that give up after ``read_timeout`` seconds of silence; failures that say what happened. ``settings`` are
        PyMySQL's (the binlog reader adds its own); ``purpose`` names the connection in messages."""
        login = self.login
        host, port = login.host, login.port
        try:
            return _SourceConnection(
                host=host, port=port, user=login.user, password=login.password.get_secret_value(),
                connect_timeout=login.connect_timeout, read_timeout=read_timeout,
                write_timeout=login.limits.read_seconds,
                ssl=self._tls_context, tls_required=bool(login.tls and login.tls.required), **settings)
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            reason = exc.args[1] if len(exc.args) > 1 else str(exc)
            if code in _LOGIN_REFUSED:
                check = ("check the connection's login and password, and that the user may connect from this "
                         "worker's host and is not locked; a retry would be refused the same way.")
                if getattr(exc, "login_in_clear_to_tls_server", False):
                    check = ("The connection uses no TLS and the server offers it: if the server requires TLS "
                             "(require_secure_transport=ON, which MariaDB reports as a refused login), give the "
                             f'connection an `ssl` extra, such as {{"ssl": {{"ca": "/path/to/ca.pem"}}}} ({TLS_DOC}). '
                             f"Else {check}")
                # The server's message names the user and host, never the password.
                raise AccessDenied(
                    f"The server {host}:{port} refused the login of the Airflow connection {login.conn_id!r} "
                    f"(MySQL error {code}: {reason}). {check[0].upper()}{check[1:]}") from None
            if code in _TLS_REQUIRED:
                raise TlsNotPossible(
                    f"The server {host}:{port} accepts only TLS connections (MySQL error {code}: {reason}), and the "
                    f"Airflow connection {login.conn_id!r} asks for none. Give it an `ssl` extra, such as "
                    f'{{"ssl": {{"ca": "/path/to/ca.pem"}}}} ({TLS_DOC}).') from None
            original = getattr(exc, "original_exception", None)
            if isinstance(original, ssl.SSLError):
                raise TlsNotPossible(_tls_failure(original, (host, port), login.conn_id, login.tls)) from None
            if _timed_out(exc):
                raise SourceTimedOut(login.limits.read_timed_out((host, port), read_timeout,
                                                                 f"a new {purpose}")) from None
            raise  # the server went away, refused the connection: a retry may get through


    @contextlib.contextmanager
    def failures(self) -> Iterator[None]:
        """A statement stopped at the statement time limit, or a server silent past the read time limit, as an
        error that names the limit and the key that sets it."""
        limits, address = self.login.limits, self.login.address
        try:
            yield
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            if code in STATEMENT_TIMEOUT_ERRORS:
                raise StatementTimedOut(limits.statement_timed_out(address)) from None
            if _timed_out(exc):
                raise SourceTimedOut(limits.read_timed_out(address, limits.answer_seconds, "a statement")) from None
            raise


    @contextlib.contextmanager
    def streaming_reads(self) -> Iterator[StreamingReads]:
        """One connection for reads streamed one after another (a snapshot's chunks, a re-read), closed on
        leaving. No statement time limit: the server would count the time its rows wait for the reader (each read
        is one chunk); the server may stay silent for the statement time limit and the read time limit."""
        conn = self.connect(self.login.limits.answer_seconds, "connection for streamed reads", **SESSION)
        try:
            yield StreamingReads(conn, self.failures)
        finally:
            conn.close()


class StreamingReads:
    """Reads on one connection of the source hook, one statement after another: each through a server-side
    cursor, whose rows come as they are fetched (a table is read without holding it in memory)."""

    def __init__(self, conn: pymysql.connections.Connection, failures: Callable[[], Any]) -> None:
        self._conn, self._failures = conn, failures

    @contextlib.contextmanager
    def cursor(self) -> Iterator[pymysql.cursors.SSCursor]:
        """A server-side cursor; its result is read to the end before the connection's next statement."""
        with self._failures(), _server_side_cursor(self._conn) as cursor:
            yield cursor

    def rollback(self) -> None:
        """End the transaction the reads began (``START TRANSACTION READ ONLY``)."""
        self._conn.rollback()


@contextlib.contextmanager
def _server_side_cursor(conn: pymysql.connections.Connection) -> Iterator[pymysql.cursors.SSCursor]:
    """A server-side cursor of ``conn``, closed (its result read to the end) unless the connection was lost
    mid-read: PyMySQL would then try to read the rest from a closed socket, and hide the error that lost it."""
    cursor = conn.cursor(pymysql.cursors.SSCursor)
    try:
        yield cursor
    finally:
        if conn.open:
            cursor.close()
        else:
            # Nothing left to read: the cursor and its result stay closed, now and when they are collected.
            result = getattr(cursor, "_result", None)
            if result is not None:
                result.unbuffered_active = False
            cursor.connection = None  # type: ignore[assignment]  # as PyMySQL marks a closed cursor


class _SourceConnection(pymysql.connections.Connection):
    """A PyMySQL connection that will not log in without TLS when its settings require TLS. (PyMySQL itself goes
    on in clear when the server offers no TLS: the login would then cross the network unprotected.)"""

    def __init__(self, *, tls_required: bool = False, **settings: Any) -> None:
        self._tls_required = tls_required
        self._stream: StreamFormat | None = None  # set when the connection asks for a binlog dump
        self._unpacked: deque[bytes] = deque()  # plain events of a compressed one not yet read
        super().__init__(**settings)

    def _request_authentication(self) -> None:
        # The server's capabilities are those of its greeting, read before this step (untyped in the stubs).
        offers_tls = bool(getattr(self, "server_capabilities", 0) & CLIENT.SSL)
        if self._tls_required and not offers_tls:
            raise TlsNotPossible(
                f"The server {self.host}:{self.port} offers no TLS, and the connection's TLS settings require it; "
                "nothing was sent. Configure TLS on the server (ssl_cert, ssl_key), or check that the connection "
                f"points at the right server ({TLS_DOC}).")
        try:
            super()._request_authentication()  # type: ignore[misc]
        except pymysql.err.OperationalError as exc:
            # MariaDB refuses a login in clear to a server that requires TLS as it refuses a wrong password: the
            # message then names both causes.
            exc.login_in_clear_to_tls_server = offers_tls and not self._tls_used  # type: ignore[attr-defined]
            raise

    @property
    def _tls_used(self) -> bool:
        return bool(getattr(self, "ssl", False))

    # --- a binlog dump: compressed events handed on as the plain events they hold ---------------------------

    def _write_bytes(self, data: bytes) -> None:
        # The binlog reader sends its dump request as bytes of its own (a 4-byte header, then the command).
        if len(data) > 4 and data[4] in (COMMAND.COM_BINLOG_DUMP, COMMAND.COM_BINLOG_DUMP_GTID):
            self._stream, self._unpacked = StreamFormat(), deque()
        super()._write_bytes(data)  # type: ignore[misc]

    def _read_packet(self, packet_type: type[MysqlPacket] = MysqlPacket) -> MysqlPacket:
        """The next packet; on a binlog dump, a compressed event's plain events, one per read, in its place
        (``core.binlog_events.uncompressed``: what the server would have sent uncompressed)."""
        if self._unpacked:
            return packet_type(self._unpacked.popleft(), self.encoding)
        packet: MysqlPacket = super()._read_packet(packet_type)  # type: ignore[no-untyped-call]
        stream = self._stream
        if stream is None:
            return packet
        data: bytes = packet.get_all_data()  # type: ignore[no-untyped-call]
        if len(data) <= HEADER or data[0] != 0:  # an event is an OK byte then its header
            return packet
        code = data[5]
        if code == FORMAT_DESCRIPTION:
            stream.learn(data[1:])
        elif code in COMPRESSED:
            self._unpacked.extend(b"\0" + event for event in uncompressed(data[1:], stream))
            return self._read_packet(packet_type)  # (a payload may hold no event)
        return packet


def _ssl_context(tls: SourceTls, conn_id: str) -> ssl.SSLContext:
    """The SSL context of ``tls``: what of the server's certificate is checked, and the client's certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.verifies_certificate:
        try:
            if tls.ca or tls.capath:
                context.load_verify_locations(cafile=tls.ca, capath=tls.capath)
            else:
                context.load_default_certs()  # a server certificate signed by a CA the system trusts
        except (OSError, ssl.SSLError) as exc:
            raise InvalidTlsSettings(f"The CA of the Airflow connection {conn_id!r} cannot be read "
                                     f"({tls.ca or tls.capath}: {exc}). Give the path of the PEM file of the CA "
                                     "that signed the server's certificate, readable on every worker "
                                     f"({TLS_DOC}).") from None
        # As the MySQL clients do: the certificates a server makes for itself lack extensions Python's strict mode
        # wants.
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
        context.check_hostname = tls.checks_host_name
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.cert:
        try:
            context.load_cert_chain(tls.cert, keyfile=tls.key)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidTlsSettings(f"The client certificate of the Airflow connection {conn_id!r} cannot be read "
                                     f"(cert {tls.cert}, key {tls.key or 'in the cert file'}: {exc}). Give the paths "
                                     f"of PEM files readable on every worker ({TLS_DOC}).") from None
    if tls.cipher:
        try:
            context.set_ciphers(tls.cipher)
        except ssl.SSLError as exc:
            raise InvalidTlsSettings(f"The cipher list {tls.cipher!r} of the Airflow connection {conn_id!r} names no "
                                     f"cipher this client has ({exc}).") from None
    return context


def _tls_failure(exc: ssl.SSLError, address: tuple[str, int], conn_id: str, tls: SourceTls | None) -> str:
    asked = tls.describe() if tls is not None else "TLS"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"The certificate of the server {address[0]}:{address[1]} does not verify ({exc.verify_message}) "
                f"with the TLS settings of the Airflow connection {conn_id!r} ({asked}). Give as `ca` the CA that "
                "signed the server's certificate; with VERIFY_IDENTITY the certificate must also name the host the "
                f"connection uses. A retry would fail the same way ({TLS_DOC}).")
    return (f"The TLS handshake with the server {address[0]}:{address[1]} failed ({exc.reason or exc}) with the TLS "
            f"settings of the Airflow connection {conn_id!r} ({asked}). Check the server's TLS setup and the "
            f"connection's client certificate and ciphers ({TLS_DOC}).")


def _timed_out(exc: pymysql.err.MySQLError) -> bool:
    """A read or write that gave up at the connection's time limit: PyMySQL reports it as a lost connection (2013)
    or a server gone (2006), with the socket's "timed out"."""
    code = exc.args[0] if exc.args else None
    return code in (2006, 2013) and "timed out" in str(exc.args[-1])
