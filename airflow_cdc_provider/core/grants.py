"""Reading ``SHOW GRANTS`` to tell whether the capture user holds the privileges capture needs.

The capture user needs exactly: REPLICATION SLAVE (to read the binlog), REPLICATION CLIENT (to read binlog
status and the list of binlogs; MariaDB 10.5+ calls it BINLOG MONITOR) and SELECT on each captured table.
Anything more is reported as a warning (``excess_privileges``): the provider never writes to the source, so a
write privilege, an administrative one or SELECT on every schema only widens what a leaked password opens.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from airflow_cdc_provider.core.identifiers import TableName, quote_identifier

REPLICATION_SLAVE = "REPLICATION SLAVE"
REPLICATION_CLIENT = "REPLICATION CLIENT"
GRANT_OPTION = "GRANT OPTION"
# What capture uses; USAGE is "no privilege", the line every account has.
_NEEDED = frozenset({"USAGE", "SELECT", REPLICATION_SLAVE, REPLICATION_CLIENT})
_ALIASES = {
    "REPLICATION REPLICA": REPLICATION_SLAVE,
    "BINLOG MONITOR": REPLICATION_CLIENT,
    "ALL": "ALL PRIVILEGES",
}
_NAME = r"`(?:[^`]|``)*`|\*|[A-Za-z0-9_$\\%]+"
_SCOPE = re.compile(rf"^(?:(?:TABLE|FUNCTION|PROCEDURE|PACKAGE BODY|PACKAGE)\s+)?({_NAME})(?:\.({_NAME}))?\s+TO\s",
                    re.I)


@dataclass(frozen=True)
class Grant:
    """One privilege on one scope; ``None`` parts of a scope mean ``*``."""

    privilege: str
    schema: str | None
    table: str | None
    columns: bool = False  # a column-level grant, which does not allow reading whole rows


@dataclass
class Grants:
    grants: list[Grant] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)

    def holds(self, privilege: str, table: TableName | None = None) -> bool:
        for grant in self.grants:
            if grant.columns or grant.privilege not in (privilege, "ALL PRIVILEGES"):
                continue
            if grant.schema is None:
                return True
            if table is None:
                continue
            if grant.table is None and _like(grant.schema, table.schema):
                return True
            if grant.schema == table.schema and grant.table == table.table:
                return True
        return False


def _unquote(name: str) -> str | None:
    if name == "*":
        return None
    if name.startswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def _like(pattern: str, value: str) -> bool:
    """MySQL matches database names in grants as LIKE patterns: ``_`` and ``%`` are wildcards unless escaped."""
    regex, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            regex.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        regex.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.fullmatch("".join(regex), value, re.S) is not None


def _split_privileges(text: str) -> tuple[list[tuple[str, bool]], str] | None:
    """Split ``SELECT (`a`), INSERT ON …`` into [(privilege, is_column_level)] and the text after ``ON``."""
    privileges: list[tuple[str, bool]] = []
    word: list[str] = []
    columns, depth, quoted, i = False, 0, False, 0
    while i < len(text):
        ch = text[i]
        if quoted:
            quoted = ch != "`" or text[i + 1 : i + 2] == "`"
            if ch == "`" and quoted:
                i += 1
        elif ch == "`":
            quoted = True
        elif ch == "(":
            depth, columns = depth + 1, True
        elif ch == ")":
            depth -= 1
        elif depth == 0 and ch == ",":
            privileges.append((" ".join("".join(word).split()).upper(), columns))
            word, columns = [], False
        elif depth == 0 and re.match(r"\sON\s", text[i : i + 4], re.I):
            privileges.append((" ".join("".join(word).split()).upper(), columns))
            return privileges, text[i + 4 :].lstrip()
        elif depth == 0:
            word.append(ch)
        i += 1
    return None


def parse_grants(lines: Iterable[str]) -> Grants:
    """Parse the lines of ``SHOW GRANTS`` (MySQL 8 or MariaDB); lines it does not understand are skipped."""
    result = Grants()
    for line in lines:
        line = line.strip()
        if not line.upper().startswith("GRANT "):
            continue
        split = _split_privileges(line[6:])
        if split is None:
            # "GRANT `role`@`%` TO `user`@`%`": a role, whose privileges SHOW GRANTS does not list.
            role = re.match(r"^GRANT\s+(.*?)\s+TO\s", line, re.I)
            if role:
                result.roles.append(role[1])
            continue
        privileges, rest = split
        scope = _SCOPE.match(rest)
        if not scope:
            continue
        schema, table = _unquote(scope[1]), _unquote(scope[2]) if scope[2] else None
        if scope[2] is None:  # "ON `role`"-like or a bare name: not a privilege scope we use
            continue
        for privilege, columns in privileges:
            privilege = _ALIASES.get(privilege, privilege)
            result.grants.append(Grant(privilege, schema, table, columns))
        if re.search(r"\bWITH\s+GRANT\s+OPTION\b", rest, re.I):
            result.grants.append(Grant(GRANT_OPTION, schema, table))
    return result


def _scope(schema: str | None, table: str | None) -> str:
    if schema is None:
        return "*.*"
    return f"{quote_identifier(schema)}.{'*' if table is None else quote_identifier(table)}"


def excess_privileges(grants: Grants, user: str) -> list[str]:
    """The privileges ``user`` holds beyond what capture needs, one warning per scope with the statement that takes
    them back; empty for a least-privilege user. SELECT on ``*.*`` is one of them: it reads every schema, the
    server's own ``mysql`` schema (its password hashes) included, where capture needs its tables only."""
    extra: dict[tuple[str | None, str | None], list[str]] = {}
    for grant in grants.grants:
        if grant.privilege not in _NEEDED or (grant.privilege == "SELECT" and grant.schema is None):
            names = extra.setdefault((grant.schema, grant.table), [])
            if grant.privilege not in names:
                names.append(grant.privilege)
    warnings = []
    for (schema, table), names in extra.items():
        scope = _scope(schema, table)
        why = ("which reads every schema, the mysql schema's password hashes included, where capture needs its "
               "tables only" if names == ["SELECT"] else "which capture does not need: it never writes to the "
               "source nor administers it")
        revoke = [n for n in names if n != GRANT_OPTION]
        fixes = ([f"REVOKE {', '.join(revoke)} ON {scope} FROM {user};"] if revoke else []) + (
            [f"REVOKE GRANT OPTION ON {scope} FROM {user};"] if GRANT_OPTION in names else [])
        if "ALL PRIVILEGES" in names or (schema is None and "SELECT" in names):
            fixes.append(f"then GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO {user}; and GRANT SELECT ON "
                         f"<schema>.* TO {user}; for each captured schema.")
        warnings.append(f"The capture user {user} holds {', '.join(names)} on {scope}, {why}. Least privilege: "
                        + " ".join(fixes))
    return warnings


@dataclass(frozen=True)
class CaptureGrants:
    """What the capture user's privileges mean for a run whose binlog (if it reads one) it may read."""

    warnings: list[str]  # what it holds beyond what capture needs (``excess_privileges``)
    unreadable: dict[TableName, str]  # the tables it may not read, each with the fix (``unreadable_tables``)


def missing_capture_privileges(grants: Grants, user: str, tables: Iterable[TableName] = (),
                               binlog: bool = True) -> list[str]:
    """The problems, one sentence each, that stop ``user`` from capturing ``tables``; empty when none. Without
    ``binlog`` (every table in diff mode) the replication privileges are not needed."""
    return _with_roles([*_missing_replication(grants, user, binlog),
                        *(_missing_select(table, user) for table in tables if not grants.holds("SELECT", table))],
                       grants, user)


def missing_source_privileges(grants: Grants, user: str, binlog: bool = True) -> list[str]:
    """The problems that stop ``user`` from capturing any table (the replication privileges the binlog needs; none
    without ``binlog``), one sentence each; empty when none."""
    return _with_roles(_missing_replication(grants, user, binlog), grants, user)


def unreadable_tables(grants: Grants, user: str, tables: Iterable[TableName]) -> dict[TableName, str]:
    """Each of ``tables`` that ``user`` may not read (no SELECT on it), with the fix: that table cannot be captured,
    the others can."""
    return {table: " ".join(_with_roles([_missing_select(table, user)], grants, user))
            for table in tables if not grants.holds("SELECT", table)}


def _missing_replication(grants: Grants, user: str, binlog: bool) -> list[str]:
    return [f"The user {user} lacks the privilege {privilege}, needed {why}. "
            f"Fix: GRANT {privilege} ON *.* TO {user};"
            for privilege, why in ((REPLICATION_SLAVE, "to read the binlog"),
                                   (REPLICATION_CLIENT, "to read the binlog position and list the binlogs (MariaDB: "
                                                        "BINLOG MONITOR)")) if binlog and not grants.holds(privilege)]


def _missing_select(table: TableName, user: str) -> str:
    return (f"The user {user} lacks SELECT on {table}, needed to read the table. "
            f"Fix: GRANT SELECT ON {table.quoted} TO {user};")


def _with_roles(problems: list[str], grants: Grants, user: str) -> list[str]:
    """``problems``, and when there are some, that the roles' privileges were not counted."""
    if problems and grants.roles:
        return [*problems, f"The user {user} has the roles {', '.join(grants.roles)}, whose privileges are not "
                           "counted: grant the privileges above to the user directly."]
    return problems
