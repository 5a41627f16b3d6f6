"""TLS to the source and the time limits on it, against real servers: one of this module's own that requires TLS
(``require_secure_transport``, a certificate of a CA the test made), and the session's server without TLS; each a
MariaDB and a MySQL (whose users log in by caching_sha2_password: over TLS, and in clear by its RSA exchange).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from airflow_cdc_testing.server import Product

from airflow_cdc_provider.core.errors import (
    AccessDenied,
    CdcError,
    SourceTimedOut,
    StatementTimedOut,
    TlsNotPossible,
)
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, in_one_directory
from tests.conftest import conn_env
from tests.servers import start_server

ITEMS = TableName("tls_db", "items")


@pytest.fixture(scope="module", params=[Product.MARIADB, Product.MYSQL])
def tls_server(request, tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp(f"{request.param}-tls"), tls=True, product=request.param)
    try:
        server.execute("CREATE DATABASE tls_db",
                       "CREATE TABLE tls_db.items (id INT PRIMARY KEY, label VARCHAR(1000) NOT NULL)")
        yield server
    finally:
        server.stop()


class TlsUser:
    """A capture user on the TLS server: ``verified`` is its Airflow connection with the extra the server gives
    (``ssl.ca``, VERIFY_IDENTITY); ``with_extra`` makes another connection of the same login with another extra."""

    def __init__(self, conn_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.verified, self._monkeypatch = conn_id, monkeypatch
        self._uri = {k: v for k, v in json.loads(os.environ[conn_env(conn_id)]).items() if k != "extra"}

    def with_extra(self, extra: dict | None) -> str:
        name = f"{self.verified}_{os.urandom(3).hex()}"
        self._monkeypatch.setenv(conn_env(name), json.dumps({**self._uri, **({"extra": extra} if extra else {})}))
        return name


@pytest.fixture
def tls_user(tls_server, make_user, monkeypatch):
    return TlsUser(make_user(server=tls_server), monkeypatch)


def test_queries_and_a_binlog_pass_go_through_tls_with_a_verified_certificate(tls_server, tls_user, tmp_path):
    hook = MySqlSourceHook(tls_user.verified)
    assert hook.tls is not None and hook.tls.mode == "verify_identity"
    start = hook.current_watermark()
    tls_server.execute("INSERT INTO tls_db.items VALUES (1, 'one'), (2, 'two')", "DELETE FROM tls_db.items WHERE id = 2")
    with hook.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cursor.fetchone()[1].startswith("TLSv1.")
    if tls_server.product is Product.MYSQL:  # its only way to log in: the password goes over the TLS channel
        plugins = tls_server.execute(f"SELECT plugin FROM mysql.user WHERE user = '{hook.login.user}'")
        assert plugins == [("caching_sha2_password",)]
    header = hook.raw_header(ITEMS)
    # The pass's replication connection is the hook's too: the server takes no TCP client without TLS.
    result = extract(hook, in_one_directory([header], tmp_path / "raw"), start, hook.current_watermark()).check()
    assert result.counts[str(ITEMS)] == {"I": 2, "U": 0, "D": 1}


def test_a_ca_that_did_not_sign_the_servers_certificate_is_refused_for_good(tls_server, tls_user, tmp_path):
    hook = MySqlSourceHook(tls_user.with_extra({"ssl": {"ca": str(tls_server.tls.other_ca)}}))
    with pytest.raises(TlsNotPossible) as caught:
        hook.current_watermark()
    message = str(caught.value)
    assert f"The certificate of the server 127.0.0.1:{tls_server.port} does not verify" in message
    assert "Give as `ca` the CA that signed the server's certificate" in message and "A retry would fail" in message
    assert isinstance(caught.value, CdcError)  # the task fails without its retries
    # The binlog reader's connection is refused the same way.
    good = MySqlSourceHook(tls_user.verified)
    header, start = good.raw_header(ITEMS), good.current_watermark()
    tls_server.execute("INSERT INTO tls_db.items VALUES (3, 'three')")
    with pytest.raises(TlsNotPossible, match="does not verify"):
        extract(hook, in_one_directory([header], tmp_path / "raw"), start, good.current_watermark())


def test_a_connection_without_tls_is_refused_clearly(tls_server, tls_user):
    for extra in (None, {"ssl_mode": "DISABLED"}):
        if tls_server.product is Product.MYSQL:  # MySQL has an error of its own for it
            with pytest.raises(TlsNotPossible) as refused:
                MySqlSourceHook(tls_user.with_extra(extra)).current_watermark()
            assert f"The server 127.0.0.1:{tls_server.port} accepts only TLS connections (MySQL error 3159" in \
                str(refused.value)
            assert "asks for none. Give it an `ssl` extra" in str(refused.value)
            continue
        # MariaDB refuses it as it refuses a wrong password: the message names both.
        with pytest.raises(AccessDenied) as caught:
            MySqlSourceHook(tls_user.with_extra(extra)).current_watermark()
        message = str(caught.value)
        assert f"The server 127.0.0.1:{tls_server.port} refused the login" in message
        assert "The connection uses no TLS and the server offers it: if the server requires TLS" in message
        assert "give the connection an `ssl` extra" in message and "Else check the connection's login" in message
    # A wrong password over TLS is told as before.
    wrong = tls_user.with_extra({"ssl": {"ca": str(tls_server.tls.ca)}})
    os.environ[conn_env(wrong)] = json.dumps({**json.loads(os.environ[conn_env(wrong)]), "password": "wrong"})
    with pytest.raises(AccessDenied) as caught:
        MySqlSourceHook(wrong).current_watermark()
    assert "uses no TLS" not in str(caught.value) and "Check the connection's login" in str(caught.value)


def test_tls_required_of_a_server_without_tls_is_refused_before_the_login(mariadb, make_user, monkeypatch):
    conn_id = make_user()
    uri = json.loads(os.environ[conn_env(conn_id)])
    monkeypatch.setenv(conn_env(conn_id), json.dumps({**uri, "extra": {"ssl_mode": "REQUIRED"}}))
    with pytest.raises(TlsNotPossible, match=f"The server 127.0.0.1:{mariadb.port} offers no TLS"):
        MySqlSourceHook(conn_id).current_watermark()
    # PREFERRED takes a connection in clear from it.
    monkeypatch.setenv(conn_env(conn_id), json.dumps({**uri, "extra": {"ssl_mode": "PREFERRED"}}))
    assert MySqlSourceHook(conn_id).current_watermark().file.startswith("binlog.")


@pytest.mark.parametrize("product", ["mariadb", "mysql"])
def test_a_statement_past_its_time_limit_is_stopped_and_fails_clearly(product, request, make_user):
    server = request.getfixturevalue(product)
    hook = MySqlSourceHook(make_user(server=server), statement_timeout_seconds=1)
    started = time.monotonic()
    with pytest.raises(StatementTimedOut) as caught, hook.cursor() as cursor:
        # Not a SLEEP: MySQL's limit ends one as having slept, without an error.
        cursor.execute("SELECT COUNT(*) FROM information_schema.COLUMNS a, information_schema.COLUMNS b, "
                       "information_schema.COLUMNS c")
        cursor.fetchall()
    assert time.monotonic() - started < 4
    assert f"127.0.0.1:{server.port} ran past the statement time limit of 1 s" in str(caught.value)
    assert "Raise `source: statement_timeout_seconds:`" in str(caught.value)
    with hook.cursor() as cursor:  # the next statement is within the limit: MariaDB's in seconds, MySQL's in ms
        cursor.execute("SELECT @@max_statement_time, SLEEP(0.1)" if product == "mariadb" else
                       "SELECT @@max_execution_time, SLEEP(0.1)")
        assert cursor.fetchone() == ((1.0, 0) if product == "mariadb" else (1000, 0))


def test_a_streamed_read_slow_to_be_consumed_is_not_stopped_by_the_statement_time_limit(mariadb, capture_conn,
                                                                                          request):
    # More rows than the server and the sockets buffer: the server is still sending while the reader dawdles.
    # (Kept out of the shared server's binlog, and dropped after.)
    mariadb.execute("SET SESSION sql_log_bin = 0", "SET SESSION max_recursive_iterations = 100000",
                    "CREATE DATABASE IF NOT EXISTS slow_db",
                    "CREATE TABLE slow_db.wide (id INT PRIMARY KEY, pad VARCHAR(2000) NOT NULL)",
                    "INSERT INTO slow_db.wide WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                    "WHERE i < 20000) SELECT i, REPEAT('x', 2000) FROM n")
    request.addfinalizer(lambda: mariadb.execute("SET SESSION sql_log_bin = 0", "DROP DATABASE slow_db"))
    hook = MySqlSourceHook(capture_conn, statement_timeout_seconds=1)

    def read_slowly(limited: bool) -> int:
        rows = 0
        with hook.streaming_reads() as reads, reads.cursor() as cursor:
            if limited:  # what the limit would do to the same read
                cursor.execute(hook.flavor.statement_time_limit(1))
            cursor.execute("SELECT id, pad FROM slow_db.wide ORDER BY id")
            while batch := cursor.fetchmany(1000):
                rows += len(batch)
                time.sleep(0.15)
        return rows

    started = time.monotonic()
    assert read_slowly(limited=False) == 20000
    assert time.monotonic() - started > 2  # twice the limit
    with pytest.raises(StatementTimedOut):
        read_slowly(limited=True)


def test_a_silent_server_fails_reads_the_binlog_reader_and_a_new_connection_within_the_limits(tls_server, tls_user):
    hook = MySqlSourceHook(tls_user.verified, statement_timeout_seconds=1, read_timeout_seconds=1)
    start = hook.current_watermark()
    # A binlog longer than the sockets hold, so that the server is still sending when it stops.
    depth = "max_recursive_iterations" if tls_server.product is Product.MARIADB else "cte_max_recursion_depth"
    tls_server.execute(f"SET SESSION {depth} = 100000",
                       "INSERT INTO tls_db.items WITH RECURSIVE n(i) AS (SELECT 100 UNION ALL SELECT i + 1 FROM n "
                       "WHERE i < 30099) SELECT i, REPEAT('y', 1000) FROM n")
    stream = hook.binlog_stream(start, 7777, ["tls_db"], ["items"])
    pid = tls_server.process.pid
    try:
        next(iter(stream))
        with hook.streaming_reads() as reads:
            with pytest.raises(SourceTimedOut) as caught, reads.cursor() as cursor:
                cursor.execute("SELECT id, label FROM tls_db.items")
                cursor.fetchmany(100)
                os.kill(pid, signal.SIGSTOP)
                started = time.monotonic()
                while cursor.fetchmany(1000):
                    pass
        # A streamed read's server may compute for the statement time limit, then stay silent for the read's.
        assert time.monotonic() - started < 5
        assert "sent nothing for 2 s on a statement" in str(caught.value)
        started = time.monotonic()
        with pytest.raises(SourceTimedOut) as caught:
            for _ in stream:
                pass
        # The reader waits 1 s for the next event, tries the connection once more and waits 1 s for its greeting.
        assert time.monotonic() - started < 6
        assert f"The source 127.0.0.1:{tls_server.port} sent nothing for 1 s on a new binlog connection" in \
            str(caught.value)
        assert "`source: read_timeout_seconds:`" in str(caught.value)
        started = time.monotonic()
        with pytest.raises(SourceTimedOut) as caught:
            hook.current_watermark()
        assert time.monotonic() - started < 4  # the statement's 1 s and the read's 1 s
        assert "sent nothing for 2 s" in str(caught.value)
    finally:
        os.kill(pid, signal.SIGCONT)
        stream.close()
    assert hook.current_watermark() > start  # the server answers again
