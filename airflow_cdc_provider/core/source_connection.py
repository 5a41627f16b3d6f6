"""How the provider connects to the source: TLS as the Airflow connection's extra asks for it, and the time limits
that keep a hung server or network from holding a task for ever.

The extra is read as the MySQL provider (apache-airflow-providers-mysql) reads it, so that one connection serves
both: ``ssl`` (a dict, or the same as a JSON string) with ``ca``, ``capath``, ``cert``, ``key``, ``cipher``,
``check_hostname`` and ``verify_mode``, and ``ssl_mode`` beside it (DISABLED, PREFERRED, REQUIRED, VERIFY_CA,
VERIFY_IDENTITY); or the mysql-connector-python spelling, ``ssl_ca``, ``ssl_cert``, ``ssl_key``,
``ssl_verify_cert``, ``ssl_verify_identity``, ``ssl_disabled``. The hook turns the value into an SSL context.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.model import Model

TlsMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]
TLS_MODES: tuple[str, ...] = ("disabled", "preferred", "required", "verify_ca", "verify_identity")

# Keys of the `ssl` dict (the MySQL provider hands it to the client library as it is).
# No passphrase of an encrypted client key: that is a credential, which stays in the hook; the key file is read
# unencrypted, as the MySQL clients read it.
_SSL_KEYS = ("ca", "capath", "cert", "key", "cipher", "check_hostname", "verify_mode")
# The mysql-connector-python spelling, each as a key of the `ssl` dict.
_CONNECTOR_KEYS = {"ssl_ca": "ca", "ssl_cert": "cert", "ssl_key": "key", "ssl_verify_cert": "verify_mode",
                   "ssl_verify_identity": "check_hostname"}
_TRUE = ("true", "yes", "1", "required", "optional")  # a client's CERT_OPTIONAL checks the certificate too
_FALSE = ("false", "no", "0", "none")
DOC = "docs/security.md"


class InvalidTlsSettings(CdcError, ValueError):
    """The connection's extra asks for TLS in a way that cannot be followed."""


class SourceTls(Model):
    """TLS to the source: whether it is used, what of the server's certificate is checked, and the files.

    ``preferred`` uses TLS when the server offers it; ``required`` refuses a server that does not, and checks no
    certificate; ``verify_ca`` also checks the certificate against ``ca``/``capath`` (or the system's CAs);
    ``verify_identity`` also checks that it names the host the connection uses.
    """

    mode: TlsMode
    ca: str | None = None
    capath: str | None = None
    cert: str | None = None
    key: str | None = None
    cipher: str | None = None

    @property
    def used(self) -> bool:
        return self.mode != "disabled"

    @property
    def required(self) -> bool:
        """No connection without TLS, even when the server offers none."""
        return self.mode not in ("disabled", "preferred")

    @property
    def verifies_certificate(self) -> bool:
        return self.mode in ("verify_ca", "verify_identity")

    @property
    def checks_host_name(self) -> bool:
        return self.mode == "verify_identity"

    def describe(self) -> str:
        """For logs and messages: the mode and the files' paths."""
        files = ", ".join(f"{name} {value}" for name in ("ca", "capath", "cert", "key", "cipher")
                          if (value := getattr(self, name)))
        return f"TLS {self.mode.upper()}" + (f" ({files})" if files else "")


def tls_from_extra(extra: Mapping[str, Any], conn_id: str) -> SourceTls | None:
    """The TLS the Airflow connection ``conn_id``'s extra asks for, or None when it names none (no TLS).

    Raises InvalidTlsSettings naming the key, its value and what it may be: a TLS setting is never dropped
    silently (a typo would leave the connection in clear).
    """
    where = f"the extra of the Airflow connection {conn_id!r}"
    raw = extra.get("ssl")
    if isinstance(raw, str) and raw.strip():
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise InvalidTlsSettings(f"`ssl` in {where} is not a JSON object ({exc}): {raw!r}. Give it as "
                                     '{"ca": "/path/ca.pem", "cert": "/path/client-cert.pem", "key": '
                                     f'"/path/client-key.pem"}} ({DOC}).') from None
    if raw in (None, "", False, {}):
        ssl: dict[str, Any] = {}
    elif isinstance(raw, Mapping):
        ssl = dict(raw)
    else:
        raise InvalidTlsSettings(f"`ssl` in {where} must be an object of TLS settings, not {raw!r}: give it as "
                                 f'{{"ca": "/path/ca.pem"}} ({DOC}).')
    unknown = [k for k in ssl if k not in _SSL_KEYS]
    if unknown:
        raise InvalidTlsSettings(f"`ssl` in {where} has the key(s) {', '.join(map(repr, unknown))}, which are not "
                                 f"TLS settings: the keys are {', '.join(_SSL_KEYS)} ({DOC}).")
    connector = {k: v for k, v in extra.items() if k.startswith("ssl_") and k != "ssl_mode"}
    unknown = [k for k in connector if k not in _CONNECTOR_KEYS and k != "ssl_disabled"]
    if unknown:
        raise InvalidTlsSettings(f"{where} has {', '.join(map(repr, unknown))}, which this provider does not "
                                 f"read: the TLS keys are `ssl` (an object), `ssl_mode`, or "
                                 f"{', '.join(sorted([*_CONNECTOR_KEYS, 'ssl_disabled']))} ({DOC}).")
    if ssl and connector:
        raise InvalidTlsSettings(f"{where} gives TLS both as `ssl` and as {', '.join(sorted(connector))}: keep "
                                 f"one of the two ({DOC}).")
    disabled = _flag(connector.pop("ssl_disabled", False), "ssl_disabled", where)
    for name, value in connector.items():
        ssl[_CONNECTOR_KEYS[name]] = value
    mode = _mode(extra.get("ssl_mode"), where)
    if disabled:
        if mode not in (None, "disabled"):
            raise InvalidTlsSettings(f"{where} has ssl_disabled true and ssl_mode {mode.upper()}: keep one.")
        mode = "disabled"
    for name in ("ca", "capath", "cert", "key", "cipher"):
        if ssl.get(name) is not None and not (isinstance(ssl[name], str) and ssl[name].strip()):
            raise InvalidTlsSettings(f"`{name}` of the TLS settings in {where} must be a non-empty string (a file's "
                                     f"path, for ca, capath, cert and key), not {ssl[name]!r}.")
    if ssl.get("key") and not ssl.get("cert"):
        raise InvalidTlsSettings(f"The TLS settings in {where} give a client key but no `cert`: the key goes with the "
                                 "client certificate it belongs to; give both, or neither.")
    verify = _flag(ssl.get("verify_mode"), "verify_mode", where) if "verify_mode" in ssl else None
    host_name = _flag(ssl.get("check_hostname"), "check_hostname", where) if "check_hostname" in ssl else None
    if host_name and verify is False:
        raise InvalidTlsSettings(f"The TLS settings in {where} ask for check_hostname with verify_mode off: the host "
                                 "name is checked on a verified certificate only; set verify_mode true, or "
                                 "check_hostname false.")
    if mode is None:
        if not ssl:
            return None
        # As the client library takes the same `ssl` dict: with a CA the certificate is checked, and so is the
        # host name unless check_hostname is false. Unlike it, a server without TLS is refused (REQUIRED at least):
        # whoever wrote `ssl` did not mean a connection in clear.
        if verify is None:
            verify = bool(ssl.get("ca") or ssl.get("capath"))
        if host_name is None:
            host_name = verify
        mode = "verify_identity" if verify and host_name else "verify_ca" if verify else "required"
    else:
        checks = {"verify_ca": (True, False), "verify_identity": (True, True)}.get(mode, (False, False))
        for name, asked, implied in (("verify_mode", verify, checks[0]), ("check_hostname", host_name, checks[1])):
            if asked is not None and asked != implied and mode != "disabled":
                raise InvalidTlsSettings(f"The TLS settings in {where} say {name} {str(asked).lower()}, and "
                                         f"ssl_mode {mode.upper()} says {str(implied).lower()}: keep ssl_mode, "
                                         "which says it all.")
    return SourceTls(mode=mode, ca=ssl.get("ca"), capath=ssl.get("capath"), cert=ssl.get("cert"),
                     key=ssl.get("key"), cipher=ssl.get("cipher"))


def _mode(value: Any, where: str) -> TlsMode | None:
    if value is None or value == "":
        return None
    mode = str(value).strip().lower()
    if mode not in TLS_MODES:
        raise InvalidTlsSettings(f"ssl_mode in {where} is {value!r}: it is one of "
                                 f"{', '.join(m.upper() for m in TLS_MODES)} ({DOC}).")
    return mode  # type: ignore[return-value]


def _flag(value: Any, name: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise InvalidTlsSettings(f"`{name}` of the TLS settings in {where} is {value!r}: it is true or false.")


# Time limits -----------------------------------------------------------------------------------------------------


class SourceLimits(Model):
    """How long the provider lets the source take, from ``source:`` in the configuration.

    ``statement_seconds`` stops a statement on the server (``core.flavor``'s session setting) on the connections
    that run short statements: catalog, status, binlog listings, verify's sums. Streamed reads (snapshot chunks,
    re-reads) are left out of it: the server counts the time the rows wait for the client as the statement's, so a
    slow consumer would see a chunk killed; a snapshot chunk is bounded by its rows instead, and every streamed
    read's silence by the read timeout below (tested on MariaDB 10.11). ``read_seconds``
    bounds silence: the binlog reader waits that long for the next event (the pass reads to a known end, so a
    silent connection means a hung server), and a statement's connection waits for an answer as long as the
    statement may run, and ``read_seconds`` more.
    """

    statement_seconds: int = Field(3600, ge=1)
    read_seconds: int = Field(600, ge=1)

    @property
    def answer_seconds(self) -> int:
        """The socket read timeout of a connection that runs statements: the server may compute that long
        before it sends the first row."""
        return self.statement_seconds + self.read_seconds

    def statement_timed_out(self, address: tuple[str, int]) -> str:
        return (f"A statement on the source {address[0]}:{address[1]} ran past the statement time limit of "
                f"{self.statement_seconds} s and the server stopped it. Raise `source: statement_timeout_seconds:` "
                "if the statement needs longer (a large table's verify, a binlog file of many events), or find "
                "why the server is slow (locks, load).")

    def read_timed_out(self, address: tuple[str, int], seconds: int, what: str) -> str:
        key = "`source: read_timeout_seconds:`" if seconds == self.read_seconds else \
            "`source: statement_timeout_seconds:` and `source: read_timeout_seconds:`"
        return (f"The source {address[0]}:{address[1]} sent nothing for {seconds} s on {what}: the server or the "
                f"network hangs. The connection was closed. The limit is {key}; raise it if the server is merely "
                "slow.")
