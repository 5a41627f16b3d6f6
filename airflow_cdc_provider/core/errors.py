"""Errors a user of the provider can meet. Each message says what is wrong, with the value, and what to do."""

from __future__ import annotations


class CdcError(Exception):
    """Base class of every error this provider raises on purpose."""


class InvalidIdentifier(CdcError, ValueError):
    """A schema, table or column name that cannot be used safely in SQL."""


class InvalidWatermark(CdcError, ValueError):
    """A stored watermark that cannot be parsed or compared."""


class UnsupportedServer(CdcError):
    """A server whose flavor or version cannot be captured."""


class CaptureNotPossible(CdcError):
    """The server's settings or the capture user's privileges do not allow a correct capture.

    Carries every problem found, so that one run tells the user everything to fix, and the way on without the
    binlog when the binlog is what cannot serve.
    """

    def __init__(self, problems: list[str], way_on: str | None = None):
        self.problems, self.way_on = list(problems), way_on
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"Capture is not possible on this server ({len(self.problems)} problem(s)):\n{lines}"
                         + (f"\n{way_on}" if way_on else ""))


class NoUsableKey(CdcError):
    """A table with neither a primary key nor a unique key on NOT NULL columns."""


class DuplicateKey(CdcError):
    """A key declared by `key:` whose values the source holds more than once."""


class TableNotFound(CdcError):
    """A configured table that the capture user cannot see."""


class WatermarkNotReadable(CdcError):
    """A watermark whose binlog file has been purged or is from another server."""


class BadRereadCondition(CdcError):
    """A reread condition that is not a plain condition on the table's own columns (``core.condition``)."""


class AccessDenied(CdcError):
    """The server refused the capture user's login: a wrong user or password, or a host it may not come from."""


class TlsNotPossible(CdcError):
    """A connection to the source cannot be made as its TLS settings ask: the certificate does not verify, the
    server offers no TLS, or the server requires TLS and the connection has none."""


class StatementTimedOut(CdcError):
    """The server stopped a statement at the configured statement time limit: a retry would run it as long."""


# Not CdcErrors: a retry of the task may get through, so they must not fail it for good.


class SourceConnectionLost(ConnectionError):
    """The connection to the source server broke mid-read (it restarted, went away, or dropped the reader)."""


class SourceTimedOut(SourceConnectionLost):
    """The source sent nothing within the read time limit: a hung server or network (closed; a retry may pass)."""


class WorkDirFull(OSError):
    """The work directory's filesystem has no room left; nothing was committed."""


def mysql_error_said(exc: BaseException, replica_server_id: int | None = None) -> str:
    """A MySQL client error met mid-read, as messages give it: ``(MySQL error <code>: <reason>): <hint>``."""
    code = exc.args[0] if exc.args else None
    reason = exc.args[1] if len(exc.args) > 1 else exc
    return f"(MySQL error {code}: {reason}): {mysql_error_hint(code, replica_server_id)}"


def mysql_error_hint(code: int | None, replica_server_id: int | None = None) -> str:
    """What a MySQL client error met mid-read means for the user."""
    if code == 4052:
        return (f"another binlog reader uses the same replica server id {replica_server_id} on this server, and "
                "the server dropped this one; give each reader its own id")
    if code in (2003, 2006, 2013):
        return "the server went away: it was restarted, failed over, or the connection was killed"
    if code == 1927:
        return "the connection was killed on the server (KILL)"
    return "see the server's error log"
