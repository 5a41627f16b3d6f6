"""A throwaway MariaDB or MySQL server in a temp data dir on a free loopback port, for tests and the demo.

It never touches a system server: its own data dir, socket, port and no option files (``--no-defaults``).

MariaDB is Debian's own package on the machine. MySQL is Debian's ``mysql-server-core`` from the sid suite, which
needs a newer C library than the machine's: it runs in a minimal Debian root (``scripts/ensure-mysql.sh`` makes it,
at ``CDC_MYSQL_ROOT`` or ``.mysql-root`` in the repository), under ``chroot``. A MySQL server's directory is
therefore inside that root; clients reach it over TCP or through its socket, from outside the root.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import pymysql

# The settings capture needs (see core/settings.py), plus a small max_binlog_size so rotations are frequent.
CAPTURE_SETTINGS: dict[str, Any] = {
    "log_bin": True,
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "max_binlog_size": 1024 * 1024,
    "server_id": 1,
}
CAPTURE_PRIVILEGES = ("SELECT", "REPLICATION SLAVE", "REPLICATION CLIENT")


class Product(StrEnum):
    MARIADB = "mariadb"
    MYSQL = "mysql"


# What MySQL needs besides: GTIDs on (as most MySQL deployments run, and as managed services require for
# replicas), no X protocol listener, no directory for LOAD DATA (its default one does not exist in the root), and
# a small redo log (its default, 100 MB, would be most of each throwaway data directory).
MYSQL_SETTINGS: dict[str, Any] = {
    "gtid_mode": "ON",
    "enforce_gtid_consistency": "ON",
    "mysqlx": "OFF",
    "secure_file_priv": "",
    "innodb_redo_log_capacity": "8M",
}
MYSQL_ROOT = Path(os.environ.get("CDC_MYSQL_ROOT") or Path(__file__).resolve().parents[2] / ".mysql-root")


class ServerNotAvailable(RuntimeError):
    pass


def _binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/usr/local/mysql/bin")
        if path:
            return path
    raise ServerNotAvailable(
        f"None of {', '.join(names)} is installed. Install Debian's mariadb-server "
        "(apt-get install -y mariadb-server), or run `make test`/`make demo`, which install it as root."
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class CaptureUser:
    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class TlsFiles:
    """A CA and a server certificate it signed, for 127.0.0.1 and localhost, made for one server (PEM files).
    ``other_ca`` is a CA that signed nothing of it: a client that trusts only that one must refuse the server."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def other_ca(self) -> Path:
        return self.directory / "other-ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server-cert.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server-key.pem"

    @classmethod
    def make(cls, directory: Path) -> TlsFiles:
        # The cryptography package comes with Airflow; imported here so that servers without TLS do not need it.
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        files = cls(directory)
        directory.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)

        def name(text: str) -> x509.Name:
            return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

        def pem(key: ec.EllipticCurvePrivateKey) -> bytes:
            return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())

        def ca(title: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
            key = ec.generate_private_key(ec.SECP256R1())
            cert = (x509.CertificateBuilder().subject_name(name(title)).issuer_name(name(title))
                    .public_key(key.public_key()).serial_number(x509.random_serial_number())
                    .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
                    .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                    .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                 content_commitment=False, key_encipherment=False,
                                                 data_encipherment=False, key_agreement=False, encipher_only=False,
                                                 decipher_only=False), critical=True)
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                    .sign(key, hashes.SHA256()))
            return key, cert

        ca_key, ca_cert = ca("cdc test CA")
        _, other_cert = ca("cdc test CA that signed nothing")
        server_key = ec.generate_private_key(ec.SECP256R1())
        server_cert = (
            x509.CertificateBuilder().subject_name(name("localhost")).issuer_name(ca_cert.subject)
            .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
        files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        files.other_ca.write_bytes(other_cert.public_bytes(serialization.Encoding.PEM))
        files.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
        files.server_key.write_bytes(pem(server_key))
        files.server_key.chmod(0o600)
        return files


@dataclass
class ThrowawayServer:
    """A running server. ``settings`` are its server options; ``log_bin=False`` starts it without a binlog."""

    base_dir: Path
    port: int
    settings: dict[str, Any]
    process: subprocess.Popen | None = None
    owns_dir: bool = False
    environment: dict[str, str] = field(default_factory=dict)  # e.g. {"TZ": "America/New_York"}: its system zone
    tls: TlsFiles | None = None  # TLS on, and required of every TCP client (require_secure_transport)
    product: Product = Product.MARIADB

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_path(self) -> Path:
        return self.base_dir / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self.base_dir / "error.log"

    @classmethod
    def start(
        cls, base_dir: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None, timeout: float = 60,
        environment: Mapping[str, str] | None = None, tls: bool = False, product: Product = Product.MARIADB,
    ) -> ThrowawayServer:
        """``tls``: the server has a certificate of a CA made for it (``server.tls``) and refuses TCP clients
        without TLS (``require_secure_transport=ON``; root's socket connection is unaffected). ``product``: MySQL
        runs in its root (``home``), whatever ``base_dir`` says."""
        product_settings = MYSQL_SETTINGS if product is Product.MYSQL else {}
        settings = {**CAPTURE_SETTINGS, **product_settings, **(overrides or {})}
        owns = base_dir is None or product is Product.MYSQL
        base = cls.home(base_dir, product)
        files = TlsFiles.make(base / "tls") if tls else None
        if files is not None:
            settings.update(ssl_ca=files.ca, ssl_cert=files.server_cert, ssl_key=files.server_key,
                            require_secure_transport="ON")
        server = cls(base, _free_port(), settings, owns_dir=owns, environment=dict(environment or {}), tls=files,
                     product=product)
        server._install()
        server._launch(timeout)
        return server

    @staticmethod
    def home(base_dir: str | os.PathLike | None, product: Product = Product.MARIADB) -> Path:
        """The directory a server of ``product`` keeps its files in, made if need be: ``base_dir`` (a temp
        directory when None) for MariaDB; for MySQL a new directory inside its root, which ``base_dir`` (when given
        and outside the root) links to as ``mysql-server``, for a person looking."""
        if product is Product.MARIADB:
            base = Path(base_dir or tempfile.mkdtemp(prefix="cdc-mariadb-")).resolve()
            base.mkdir(parents=True, exist_ok=True)
            return base
        if not (MYSQL_ROOT / "usr" / "sbin" / "mysqld").exists():
            raise ServerNotAvailable(f"No MySQL root at {MYSQL_ROOT}: run scripts/ensure-mysql.sh as root (make test "
                                     "and make demo-mysql do), or set CDC_MYSQL_ROOT to one made before.")
        if base_dir is not None and Path(base_dir).resolve().is_relative_to(MYSQL_ROOT.resolve()):
            base = Path(base_dir).resolve()
            base.mkdir(parents=True, exist_ok=True)
            return base
        (MYSQL_ROOT / "srv").mkdir(exist_ok=True)
        # Short: the socket's path must stay under the 108 bytes a Unix socket's address holds.
        base = Path(tempfile.mkdtemp(prefix="my-", dir=MYSQL_ROOT / "srv")).resolve()
        if base_dir is not None:
            link = Path(base_dir) / "mysql-server"
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(base)
        return base

    def _in_root(self, path: Path) -> str:
        """``path`` as the server sees it: inside the MySQL root, relative to it."""
        if self.product is Product.MARIADB:
            return str(path)
        return "/" + str(path.resolve().relative_to(MYSQL_ROOT.resolve()))

    def _program(self, *names: str) -> list[str]:
        """The command that runs one of ``names`` (the first installed) for this server's product."""
        if self.product is Product.MARIADB:
            return [_binary(*names)]
        return ["chroot", str(MYSQL_ROOT), names[-1]]

    def _install(self) -> None:
        if (self.data_dir / "mysql").is_dir():
            return
        if self.product is Product.MYSQL:
            install = [*self._program("mysqld"), "--no-defaults", "--initialize-insecure", "--user=root",
                       f"--datadir={self._in_root(self.data_dir)}",
                       f"--innodb-redo-log-capacity={MYSQL_SETTINGS['innodb_redo_log_capacity']}"]
        else:
            install = [*self._program("mariadb-install-db", "mysql_install_db"), "--no-defaults",
                       f"--datadir={self.data_dir}", "--auth-root-authentication-method=normal", "--skip-test-db"]
        failures = []
        # Tried twice: on a loaded machine its bootstrap server has been seen to fail once with no cause given,
        # and the next try to succeed. Each try starts from an empty data directory.
        for _ in range(2):
            shutil.rmtree(self.data_dir, ignore_errors=True)
            result = subprocess.run(install, capture_output=True, text=True)
            if result.returncode == 0:
                return
            failures.append(f"exit code {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        raise ServerNotAvailable(f"{' '.join(install)} failed twice:\n" + "\n---\n".join(failures))

    def command(self) -> list[str]:
        inside = self._in_root
        args = [
            *self._program("mariadbd", "mysqld"), "--no-defaults", f"--datadir={inside(self.data_dir)}",
            f"--socket={inside(self.socket_path)}", f"--port={self.port}", "--bind-address=127.0.0.1",
            f"--log-error={inside(self.error_log)}", f"--pid-file={inside(self.base_dir / 'mysqld.pid')}",
            "--skip-name-resolve", "--innodb-buffer-pool-size=64M", "--character-set-server=utf8mb4",
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        for name, value in self.settings.items():
            option = name.replace("_", "-")
            if name == "log_bin":
                if value:
                    args.append(f"--log-bin={inside(self.data_dir / 'binlog')}")
            elif isinstance(value, Path):
                args.append(f"--{option}={inside(value)}")
            elif value is not None:
                args.append(f"--{option}={value}")
        return args

    def _launch(self, timeout: float) -> None:
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env={**os.environ, **self.environment})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.error_log.read_text(errors="replace")[-3000:] if self.error_log.exists() else ""
                raise ServerNotAvailable(f"The server exited with code {self.process.returncode}:\n{log}")
            try:
                self.root_connection().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.1)
        self.stop()
        raise ServerNotAvailable(f"The server did not accept connections within {timeout} s; see {self.error_log}.")

    def root_connection(self, database: str | None = None, **kwargs: Any) -> pymysql.connections.Connection:
        return pymysql.connect(
            unix_socket=str(self.socket_path), user="root", database=database, autocommit=True,
            charset="utf8mb4", **kwargs,
        )

    def execute(self, *statements: str, database: str | None = None) -> list[tuple]:
        """Run statements as root; returns the rows of the last one."""
        conn = self.root_connection(database)
        try:
            with conn.cursor() as cursor:
                rows: list[tuple] = []
                for statement in statements:
                    cursor.execute(statement)
                    rows = list(cursor.fetchall())
                return rows
        finally:
            conn.close()

    def track_binlog_dumps(self) -> dt.datetime:
        """Log every command to ``mysql.general_log`` (and count bytes per user) from now; returns the server's
        time now, for ``binlog_dumps(since)``. Each binlog dump a replication client starts is one row there."""
        self.execute("SET GLOBAL log_output = 'TABLE'", "SET GLOBAL general_log = 1", "SET GLOBAL userstat = 1")
        return self.execute("SELECT NOW(6)")[0][0]

    def binlog_dumps(self, since: dt.datetime, user: str) -> list[tuple[str, int]]:
        """The binlog dumps ``user`` started since ``since``: the (file, position) each started from."""
        rows = self.execute(
            "SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log WHERE command_type = 'Binlog Dump' "
            f"AND event_time >= '{since.isoformat(sep=' ')}' AND user_host LIKE '{user}[%' ORDER BY event_time")
        dumps = []
        for (argument,) in rows:
            match = re.search(r"Log: '([^']*)'\s+Pos: (\d+)", argument)
            dumps.append((match[1], int(match[2])) if match else (argument, -1))
        return dumps

    def bytes_sent(self, user: str) -> int:
        """Bytes the server sent to ``user``'s connections since ``track_binlog_dumps`` (USER_STATISTICS)."""
        rows = self.execute(f"SELECT BYTES_SENT FROM information_schema.USER_STATISTICS WHERE USER = '{user}'")
        return int(rows[0][0]) if rows else 0

    def run_script(self, path: str | os.PathLike, database: str | None = None) -> None:
        """Load a SQL file with the mariadb client, which understands DELIMITER and comments."""
        with open(path, "rb") as script:
            subprocess.run(
                [*self._program("mariadb", "mysql"), "--no-defaults", f"--socket={self._in_root(self.socket_path)}",
                 "-uroot", "--default-character-set=utf8mb4",
                 *([f"--database={database}"] if database else [])],
                stdin=script, check=True, capture_output=True,
            )

    def create_user(self, user: str, privileges: Iterable[str] = CAPTURE_PRIVILEGES, on: str = "*.*") -> CaptureUser:
        """A user with a random password and exactly ``privileges`` on ``on``."""
        password = secrets.token_urlsafe(16)
        statements = [f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'"]
        privileges = list(privileges)
        if privileges:
            statements.append(f"GRANT {', '.join(privileges)} ON {on} TO '{user}'@'%'")
        self.execute(*statements)
        return CaptureUser(user, password)

    def connection_uri(self, login: CaptureUser) -> dict[str, Any]:
        """An Airflow connection (conn_type mysql) for ``login``, as the JSON form of AIRFLOW_CONN_<ID>; on a
        server with TLS, with the extra that verifies its certificate (as the MySQL provider spells it)."""
        uri: dict[str, Any] = {"conn_type": "mysql", "host": "127.0.0.1", "port": self.port, "login": login.user,
                               "password": login.password}
        if self.tls is not None:
            uri["extra"] = {"ssl": {"ca": str(self.tls.ca)}, "ssl_mode": "VERIFY_IDENTITY"}
        return uri

    def restart(self, kill: bool = False, timeout: float = 60) -> None:
        """Stop the server (shut down, or SIGKILLed as a crash) and start it again on the same data and port."""
        if self.process and self.process.poll() is None:
            if kill:
                self.process.kill()
                self.process.wait()
            else:
                self._shut_down()
        self._launch(timeout)

    def _shut_down(self) -> None:
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self._shut_down()
        if self.owns_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> ThrowawayServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ExistingServer:
    """A server that is already running, reached with an admin account: ``mysql://user:password@host:port``.

    For the demo against a real MySQL 8 or MariaDB: it loads the sample schema and creates the capture user there.
    """

    url: str = field(repr=False)

    def __post_init__(self) -> None:
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(self.url)
        if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
            raise ValueError("The server URL must look like mysql://admin:password@host:3306 (scheme mysql).")
        self.host, self.port = parts.hostname, parts.port or 3306
        self._admin = {"user": unquote(parts.username or "root"), "password": unquote(parts.password or "")}

    def root_connection(self, database: str | None = None, **kwargs: Any) -> pymysql.connections.Connection:
        return pymysql.connect(host=self.host, port=self.port, database=database, autocommit=True,
                               charset="utf8mb4", **self._admin, **kwargs)

    execute = ThrowawayServer.execute
    create_user = ThrowawayServer.create_user

    def run_script(self, path: str | os.PathLike, database: str | None = None) -> None:
        """Run a plain SQL file (statements end with ``;`` at the end of a line)."""
        text = "\n".join(line for line in Path(path).read_text().splitlines() if not line.lstrip().startswith("--"))
        self.execute(*[s.strip() for s in text.split(";\n") if s.strip().rstrip(";")], database=database)

    def connection_uri(self, login: CaptureUser) -> dict[str, Any]:
        return {"conn_type": "mysql", "host": self.host, "port": self.port, "login": login.user,
                "password": login.password}

    def stop(self) -> None:
        pass
