"""What a statement logged in the binlog (a QUERY event) does to the existing rows of each table it names.

Statements that change rows without row events (TRUNCATE, a dropped partition, a table renamed or replaced) must stop
the copy of those tables; what is not understood is UNKNOWN, never taken as harmless.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any


class Effect(StrEnum):
    KEEPS_ROWS = "keeps rows"  # every existing row keeps its values (columns may be added, dropped or renamed)
    CHANGES_ROWS = "changes rows"  # rows change, appear or go without row events
    UNKNOWN = "unknown"  # not understood: the caller stops the table


# The kinds a caller acts on by themselves: the transaction's earlier row events (all, or those after the savepoint)
# did not happen.
ROLLBACK = "rollback"
ROLLBACK_TO = "rollback_to"

_RANK = {Effect.KEEPS_ROWS: 0, Effect.CHANGES_ROWS: 1, Effect.UNKNOWN: 2}


@dataclass(frozen=True)
class ColumnDefinition:
    """A column as an ALTER defines it (ADD, MODIFY, CHANGE)."""

    name: str
    type: str  # the type as written, lower-cased but for quoted members: "varchar(20)", "int unsigned", "enum('a','b')"
    not_null: bool  # NOT NULL, or PRIMARY KEY
    default: str | None  # the default's SQL text as written, or None
    generated: bool  # AS (expr) / GENERATED ALWAYS AS …
    auto_increment: bool
    charset: str | None = None  # CHARACTER SET as written (or implied by COLLATE), lower-cased
    collation: str | None = None
    unique: bool = False  # UNIQUE or PRIMARY KEY on the column itself
    per_row_default: bool = False  # a default written as an expression, which may differ from row to row


@dataclass(frozen=True)
class TableEffect:
    table: tuple[str, str]  # (schema, table), lower-cased; the schema from the statement or the default schema
    effect: Effect
    reason: str  # for a person: "TRUNCATE PARTITION removes rows without row events"
    renames: tuple[tuple[str, str], ...] = ()  # column renames (old, new) in statement order
    added: tuple[ColumnDefinition, ...] = ()
    dropped: tuple[str, ...] = ()
    redefined: tuple[ColumnDefinition, ...] = ()  # MODIFY / CHANGE: the caller compares with the old type
    readded: tuple[str, ...] = ()  # dropped and added again with the same name in this statement: a new column


@dataclass(frozen=True)
class Statement:
    """What one QUERY event does.

    ``kind``: alter, rename (also ALTER TABLE … RENAME TO), truncate, drop, create, index (CREATE/DROP INDEX), dml,
    call, schema (CREATE/ALTER/DROP DATABASE), object (views, triggers, routines, events, sequences, users, roles,
    servers, tablespaces), access (GRANT, REVOKE), maintenance (ANALYZE, OPTIMIZE, CHECK, REPAIR, FLUSH),
    transaction, rollback (ROLLBACK, XA ROLLBACK: the transaction's earlier row events did not happen),
    rollback_to (ROLLBACK TO SAVEPOINT: some of them did not), session (SET, USE, LOCK TABLES), empty (comments
    only), other (a statement that cannot name a table), multiple (several statements; tables merged), unknown.
    """

    kind: str
    tables: tuple[TableEffect, ...]
    schemas: tuple[tuple[str, Effect, str], ...] = ()  # whole schemas affected, lower-cased (DROP DATABASE)
    understood: bool = True  # False: the text was not read; the caller asks may_name() for each table

    def effect_on(self, schema: str, table: str) -> TableEffect | None:
        key = (schema.lower(), table.lower())
        return next((t for t in self.tables if t.table == key), None)


# --- reading the text -------------------------------------------------------------------------------------------


class _NotRead(Exception):
    """The text is not one the tokenizer reads (a quote or comment not closed)."""


@dataclass(frozen=True, eq=False)
class _Tok:
    kind: str  # word (bare: keyword or name), name (`quoted`), string, number, punct
    text: str  # names and strings unquoted
    var: bool  # a bare word sqlglot takes for no keyword
    dq: bool  # a "double-quoted" string: a name under ANSI_QUOTES
    start: int
    end: int
    src: str
    raw: Any  # the sqlglot token

    @property
    def up(self) -> str:
        return self.text.upper() if self.kind == "word" else ""

    @property
    def is_name(self) -> bool:
        return self.kind in ("word", "name") or (self.kind == "string" and self.dq)


_STRINGS = {"STRING", "NATIONAL_STRING", "HEX_STRING", "BIT_STRING", "BYTE_STRING", "RAW_STRING", "UNICODE_STRING"}


def _expand_executable_comments(query: str) -> str:
    """The text with ``/*!50001 … */`` and ``/*M!100100 … */`` opened: the server runs what they hold.

    A scan that knows quotes and comments, so that no marker inside a string or comment is taken for one."""
    out: list[str] = []
    i, n, inside = 0, len(query), False
    while i < n:
        c = query[i]
        if c in "'\"`":
            j = i + 1
            while j < n:
                if query[j] == "\\" and c != "`":
                    j += 2
                elif query[j] == c and query.startswith(c + c, j):
                    j += 2
                elif query[j] == c:
                    break
                else:
                    j += 1
            out.append(query[i:j + 1])
            i = j + 1
        elif c == "#" or (query.startswith("--", i) and (i + 2 >= n or query[i + 2] in " \t\r\n\f\v")):
            j = query.find("\n", i)
            j = n if j < 0 else j
            out.append(query[i:j])
            i = j
        elif query.startswith(("/*!", "/*M!"), i):
            i += 3 if query[i + 2] == "!" else 4
            digits = i
            while i < n and i - digits < 6 and query[i].isdigit():
                i += 1
            out.append(" ")
            inside = True
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(query[i:j])
            i = j
        elif inside and query.startswith("*/", i):
            out.append(" ")
            i += 2
            inside = False
        else:
            out.append(c)
            i += 1
    return "".join(out)


@cache
def _tokenizer_class() -> Any:
    from sqlglot.dialects.mysql import MySQL

    class Tokenizer(MySQL.Tokenizer):
        # MySQL's tokenizer reads what follows RENAME, REPLACE, OPTIMIZE, PREPARE … as one opaque string.
        COMMANDS = set[Any]()

    return Tokenizer


def _tokens(query: str) -> list[_Tok]:
    import sqlglot.errors

    text = _expand_executable_comments(query)
    try:
        raw = _tokenizer_class()().tokenize(text)
    except sqlglot.errors.TokenError:
        raise _NotRead from None
    toks = []
    for t in raw:
        name = t.token_type.name
        if name in _STRINGS:
            kind = "string"
        elif name == "NUMBER":
            kind = "number"
        elif name == "IDENTIFIER":
            kind = "name"
        elif t.text and (t.text[0].isalnum() or t.text[0] in "_$" or ord(t.text[0]) > 127):
            kind = "word"
        else:
            kind = "punct"
        if kind == "word" and " " in t.text.strip():  # one token for PRIMARY KEY, PARTITION BY, ORDER BY …
            toks += [_Tok("word", w, False, False, t.start, t.end, text, t) for w in t.text.split()]
            continue
        if kind == "word" and toks and toks[-1].kind == "number" and toks[-1].end + 1 == t.start:
            first = toks.pop()  # a name that starts with digits: 1t
            toks.append(_Tok("word", first.text + t.text, True, False, first.start, t.end, text, t))
            continue
        dq = kind == "string" and text[t.start:t.start + 1] == '"'
        toks.append(_Tok(kind, t.text, name == "VAR", dq, t.start, t.end, text, t))
    return toks


def _is(toks: Sequence[_Tok], i: int, *words: str) -> bool:
    """Whether the bare words (or punctuation) from ``i`` on are ``words``."""
    return all(i + k < len(toks) and (toks[i + k].up == w or (toks[i + k].kind == "punct" and toks[i + k].text == w))
               for k, w in enumerate(words))


def _punct(toks: Sequence[_Tok], i: int, text: str) -> bool:
    return i < len(toks) and toks[i].kind == "punct" and toks[i].text == text


def _skip(toks: Sequence[_Tok], i: int, *phrases: str) -> int:
    """Past any of the optional ``phrases`` (each a few words) found at ``i``, in any order."""
    moved = True
    while moved:
        moved = False
        for phrase in phrases:
            words = phrase.split()
            if _is(toks, i, *words):
                i, moved = i + len(words), True
    return i


def _group_end(toks: Sequence[_Tok], i: int) -> int:
    """The index after the parenthesis group that opens at ``i``."""
    depth = 0
    for j in range(i, len(toks)):
        if _punct(toks, j, "("):
            depth += 1
        elif _punct(toks, j, ")"):
            depth -= 1
            if depth == 0:
                return j + 1
    return len(toks)


def _source(toks: Sequence[_Tok]) -> str:
    """The text of ``toks`` as written (executable comments opened)."""
    return toks[0].src[toks[0].start:toks[-1].end + 1] if toks else ""


def _snippet(toks: Sequence[_Tok], limit: int = 80) -> str:
    text = " ".join(_source(toks).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _read_name(toks: Sequence[_Tok], i: int) -> tuple[list[str], int]:
    parts: list[str] = []
    while i < len(toks) and toks[i].is_name:
        parts.append(toks[i].text)
        i += 1
        if not (_punct(toks, i, ".") and i + 1 < len(toks) and toks[i + 1].is_name):
            break
        i += 1
    return parts, i


# --- the statement's effects, gathered table by table --------------------------------------------------------------


@dataclass
class _Found:
    effect: Effect = Effect.KEEPS_ROWS
    reasons: list[str] = field(default_factory=list)
    renames: list[tuple[str, str]] = field(default_factory=list)
    added: list[ColumnDefinition] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    redefined: list[ColumnDefinition] = field(default_factory=list)
    readded: list[str] = field(default_factory=list)

    def note(self, effect: Effect, reason: str) -> None:
        if _RANK[effect] > _RANK[self.effect]:
            self.effect, self.reasons = effect, []
        if effect == self.effect and reason not in self.reasons:
            self.reasons.append(reason)


class _Gathered:
    def __init__(self, default_schema: str) -> None:
        self.default = (default_schema or "").lower()
        self.tables: dict[tuple[str, str], _Found] = {}
        self.schemas: dict[str, tuple[Effect, str]] = {}

    def table(self, parts: Sequence[str]) -> _Found | None:
        if len(parts) not in (1, 2):
            return None
        key = (parts[0].lower(), parts[1].lower()) if len(parts) == 2 else (self.default, parts[0].lower())
        return self.tables.setdefault(key, _Found())

    def note(self, parts: Sequence[str], effect: Effect, reason: str) -> bool:
        found = self.table(parts)
        if found is not None:
            found.note(effect, reason)
        return found is not None

    def statement(self, kind: str, understood: bool = True) -> Statement:
        tables = tuple(TableEffect(key, f.effect, "; ".join(f.reasons), tuple(f.renames), tuple(f.added),
                                   tuple(f.dropped), tuple(f.redefined), tuple(f.readded))
                       for key, f in self.tables.items())
        schemas = tuple((name, effect, reason) for name, (effect, reason) in self.schemas.items())
        return Statement(kind, tables, schemas, understood)


def _unknown() -> Statement:
    return Statement("unknown", (), (), False)


# --- statements ------------------------------------------------------------------------------------------------


def classify(query: str, default_schema: str) -> Statement:
    """What the statement ``query`` (as logged, executed with ``default_schema`` as the default schema) does to the
    rows of each table it names."""
    try:
        toks = _tokens(query or "")
    except _NotRead:
        return _unknown()
    statements: list[list[_Tok]] = [[]]
    for t in toks:
        if _punct([t], 0, ";"):
            statements.append([])
        else:
            statements[-1].append(t)
    statements = [s for s in statements if s]
    if not statements:
        return Statement("empty", ())
    first = _one(statements[0], default_schema)
    # A routine, trigger or event holds its body's `;`: the first statement is then the whole text.
    if len(statements) == 1 or first.kind == "object":
        return first
    return _merge([first] + [_one(s, default_schema) for s in statements[1:]], default_schema)


def _merge(parts: Sequence[Statement], default_schema: str) -> Statement:
    gathered = _Gathered(default_schema)
    for part in parts:
        for t in part.tables:
            found = gathered.tables.setdefault(t.table, _Found())
            found.note(t.effect, t.reason)
            found.renames += t.renames
            found.added += t.added
            found.dropped += t.dropped
            found.redefined += t.redefined
            found.readded += t.readded
        for name, effect, reason in part.schemas:
            if name not in gathered.schemas or _RANK[effect] > _RANK[gathered.schemas[name][0]]:
                gathered.schemas[name] = (effect, reason)
    return gathered.statement("multiple", all(p.understood for p in parts))


_TRANSACTION = {"BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "START"}
_SESSION = {"SET", "USE", "LOCK", "UNLOCK", "DEALLOCATE", "PREPARE"}
_OBJECTS = {"VIEW", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "SEQUENCE", "USER", "ROLE", "SERVER", "TABLESPACE",
            "LOGFILE", "RESOURCE", "PACKAGE", "SYNONYM", "INSTANCE"}


def _one(toks: list[_Tok], default: str) -> Statement:
    head = toks[0].up
    found = _Gathered(default)
    if head in _TRANSACTION and not _is(toks, 0, "BEGIN", "NOT"):  # BEGIN NOT ATOMIC is a compound statement
        return Statement("transaction", ())
    if head == "XA":
        return Statement(ROLLBACK if _is(toks, 1, "ROLLBACK") else "transaction", ())
    if head == "ROLLBACK":
        i = _skip(toks, 1, "WORK")
        return Statement(ROLLBACK_TO if _is(toks, i, "TO") else ROLLBACK, ())
    if _is(toks, 0, "SET", "STATEMENT"):  # MariaDB: SET STATEMENT var=x [, …] FOR <statement>
        at = next((i for i, t in enumerate(toks) if t.up == "FOR"), None)
        return _one(toks[at + 1:], default) if at is not None and at + 1 < len(toks) else _unknown()
    if head in _SESSION:
        return Statement("session", ())
    if head == "TRUNCATE":
        i = _skip(toks, 1, "TABLE")
        parts, _ = _read_name(toks, i)
        if not found.note(parts, Effect.CHANGES_ROWS, "TRUNCATE removes every row without row events"):
            return _unknown()
        return found.statement("truncate")
    if head == "RENAME":
        return _rename(toks, found)
    if head in ("CREATE", "DROP", "ALTER"):
        return _ddl(toks, found)
    if head in ("INSERT", "REPLACE"):
        i = _skip(toks, 1, "LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO")
        parts, _ = _read_name(toks, i)
        ok = found.note(parts, Effect.CHANGES_ROWS, f"{head} logged as a statement writes rows without row events")
        return found.statement("dml") if ok else Statement("dml", (), (), False)
    if head == "LOAD":
        at = next((i for i in range(len(toks)) if _is(toks, i, "INTO", "TABLE")), None)
        parts = _read_name(toks, at + 2)[0] if at is not None else []
        ok = found.note(parts, Effect.CHANGES_ROWS, "LOAD DATA logged as a statement writes rows without row events")
        return found.statement("dml") if ok else Statement("dml", (), (), False)
    if head in ("UPDATE", "DELETE", "WITH"):
        return _update_or_delete(toks, found)
    if head == "CALL":
        # The server logs a procedure's statements one by one, not the CALL; a CALL here is read as not understood.
        return Statement("call", (), (), False)
    if head in ("GRANT", "REVOKE"):
        return Statement("access", ())
    if head in ("ANALYZE", "OPTIMIZE", "CHECK", "CHECKSUM", "REPAIR", "FLUSH"):
        return _maintenance(toks, found)
    if any(t.kind == "name" or t.var or t.dq for t in toks):
        return _unknown()
    return Statement("other", ())


def _rename(toks: list[_Tok], found: _Gathered) -> Statement:
    if not _is(toks, 1, "TABLE") and not _is(toks, 1, "TABLES"):
        return Statement("object", ()) if _is(toks, 1, "USER") else _unknown()
    i = _skip(toks, 2, "IF EXISTS")
    reason = "RENAME TABLE: the table under this name holds other rows, or none"
    while True:
        old, i = _read_name(toks, i)
        if not _is(toks, i, "TO"):
            return _unknown()
        new, i = _read_name(toks, i + 1)
        if not (found.note(old, Effect.CHANGES_ROWS, reason) and found.note(new, Effect.CHANGES_ROWS, reason)):
            return _unknown()
        if not _punct(toks, i, ","):
            break
        i += 1
    i = _skip(toks, i, "NOWAIT", "WAIT")
    if i < len(toks) and toks[i].kind == "number":
        i += 1
    return found.statement("rename") if i == len(toks) else _unknown()


def _ddl(toks: list[_Tok], found: _Gathered) -> Statement:
    verb = toks[0].up
    i = _skip(toks, 1, "OR REPLACE")
    replace = i > 1
    # The word that says what is created, altered or dropped; the words before it are modifiers.
    decisive = ("TABLE", "TABLES", "INDEX", "DATABASE", "SCHEMA", *_OBJECTS)
    at = next((j for j in range(i, min(len(toks), i + 16)) if toks[j].up in decisive), None)
    if at is None:
        return _unknown()
    what, before = toks[at].up, {t.up for t in toks[i:at]}
    if what in ("DATABASE", "SCHEMA"):
        parts, _ = _read_name(toks, _skip(toks, at + 1, "IF EXISTS", "IF NOT EXISTS"))
        if verb == "DROP" or replace:
            if len(parts) != 1:
                return _unknown()
            found.schemas[parts[0].lower()] = (Effect.CHANGES_ROWS, f"{verb} {what} removes every table in it")
        return found.statement("schema")
    if what in ("TABLE", "TABLES"):
        if verb == "ALTER" and before <= {"ONLINE", "OFFLINE", "IGNORE"}:
            return _alter(toks, at + 1, "IGNORE" in before, found)
        if not before <= {"TEMPORARY"}:
            return _unknown()
        if "TEMPORARY" in before:  # a session's own table: not one the copy reads
            return Statement(verb.lower(), ())
        j = _skip(toks, at + 1, "IF EXISTS", "IF NOT EXISTS")
        while True:
            parts, j = _read_name(toks, j)
            reason = (f"{verb} TABLE: the table's rows are gone" if verb == "DROP"
                      else "CREATE TABLE: the table is new, or replaced, without row events for its old rows")
            if not found.note(parts, Effect.CHANGES_ROWS, reason):
                return _unknown()
            if verb != "DROP" or not _punct(toks, j, ","):
                break
            j += 1
        return found.statement(verb.lower())
    if what == "INDEX":
        if verb == "ALTER" or not before <= {"ONLINE", "OFFLINE", "UNIQUE", "FULLTEXT", "SPATIAL"}:
            return _unknown()
        on = next((j for j in range(at + 1, len(toks)) if toks[j].up == "ON"), None)
        parts = _read_name(toks, on + 1)[0] if on is not None else []
        if not found.note(parts, Effect.KEEPS_ROWS, f"{verb} INDEX: rows keep their values"):
            return _unknown()
        return found.statement("index")
    return Statement("object", ())


def _maintenance(toks: list[_Tok], found: _Gathered) -> Statement:
    head = toks[0].up
    i = _skip(toks, 1, "NO_WRITE_TO_BINLOG", "LOCAL")
    if head == "ANALYZE" and not (_is(toks, i, "TABLE") or _is(toks, i, "TABLES")):
        return _one(toks[i:], found.default) if i < len(toks) else _unknown()  # MariaDB: ANALYZE <statement> runs it
    if head == "FLUSH" or not (_is(toks, i, "TABLE") or _is(toks, i, "TABLES")):
        return Statement("maintenance", ())
    effect = Effect.CHANGES_ROWS if head == "REPAIR" else Effect.KEEPS_ROWS
    reason = ("REPAIR TABLE may drop rows it cannot read" if head == "REPAIR"
              else f"{head} TABLE: rows keep their values")
    i += 1
    while True:
        parts, i = _read_name(toks, i)
        if not found.note(parts, effect, reason):
            return _unknown()
        if not _punct(toks, i, ","):
            return found.statement("maintenance")
        i += 1


def _update_or_delete(toks: list[_Tok], found: _Gathered) -> Statement:
    """UPDATE and DELETE (also multi-table) logged as statements: every table they name may lose or change rows.

    sqlglot reads the table references; the modifiers it does not know are left out first (it would take
    ``UPDATE LOW_PRIORITY t`` for the table LOW_PRIORITY aliased t)."""
    import sqlglot.errors
    from sqlglot import exp
    from sqlglot.dialects.dialect import Dialect

    kept = [t for n, t in enumerate(toks)
            if not (n > 0 and t.up in ("LOW_PRIORITY", "QUICK", "IGNORE") and toks[0].up in ("UPDATE", "DELETE")
                    and all(p.up in ("LOW_PRIORITY", "QUICK", "IGNORE") for p in toks[1:n]))]
    try:
        raw = list({id(t.raw): t.raw for t in kept}.values())  # a keyword of two words is one sqlglot token
        trees = Dialect.get_or_raise("mysql").parser().parse(raw, toks[0].src)
    except (sqlglot.errors.SqlglotError, RecursionError):
        return Statement("dml", (), (), False)
    if len(trees) != 1 or not isinstance(trees[0], (exp.Update, exp.Delete, exp.Insert)):
        return Statement("dml", (), (), False) if toks[0].up != "WITH" else _unknown()
    for table in trees[0].find_all(exp.Table):
        parts = [p for p in (table.text("db"), table.name) if p]
        if parts:
            found.note(parts, Effect.CHANGES_ROWS,
                       f"{type(trees[0]).__name__.upper()} logged as a statement changes rows without row events")
    return found.statement("dml") if found.tables else Statement("dml", (), (), False)


# --- ALTER TABLE -----------------------------------------------------------------------------------------------

_PARTITION_OPS = {"ADD", "DROP", "DISCARD", "IMPORT", "TRUNCATE", "COALESCE", "REORGANIZE", "EXCHANGE", "ANALYZE",
                  "CHECK", "OPTIMIZE", "REBUILD", "REPAIR", "CONVERT"}
_KEEPING_PARTITION_OPS = {"ADD", "COALESCE", "REORGANIZE", "REBUILD", "ANALYZE", "CHECK", "OPTIMIZE"}
# Table options that leave every value as it is; ENGINE is looked at on its own.
_TABLE_OPTIONS = {
    "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHARACTER", "CHARSET", "CHECKSUM", "COLLATE", "COMMENT", "COMPRESSION",
    "CONNECTION", "DATA", "INDEX", "DELAY_KEY_WRITE", "ENCRYPTION", "INSERT_METHOD", "KEY_BLOCK_SIZE", "MAX_ROWS",
    "MIN_ROWS", "PACK_KEYS", "ROW_FORMAT", "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES",
    "TABLESPACE", "STORAGE", "SECONDARY_ENGINE", "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE", "AUTOEXTEND_SIZE",
    "PAGE_CHECKSUM", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL", "IETF_QUOTES", "ENCRYPTION_KEY_ID",
    "ENCRYPTED", "ALGORITHM", "LOCK", "DEFAULT"}
# Engines that keep the rows they are given; another engine (BLACKHOLE keeps none) is not taken as harmless.
_ROW_KEEPING_ENGINES = {"innodb", "myisam", "aria", "rocksdb", "memory", "heap"}
_CONSTRAINTS = {"INDEX", "KEY", "FULLTEXT", "SPATIAL", "UNIQUE", "PRIMARY", "FOREIGN", "CONSTRAINT", "CHECK"}


def _alter(toks: list[_Tok], i: int, ignore: bool, found: _Gathered) -> Statement:
    i = _skip(toks, i, "IF EXISTS")
    parts, i = _read_name(toks, i)
    target = found.table(parts)
    if target is None:
        return _unknown()
    if _is(toks, i, "WAIT") and i + 1 < len(toks) and toks[i + 1].kind == "number":
        i += 2
    i = _skip(toks, i, "NOWAIT")
    # Specifications are separated by commas, but a partition operation takes the rest of the statement (its names
    # are a comma list: DROP PARTITION p0, p1), and partition options follow the list without a comma.
    specs: list[list[_Tok]] = [[]]
    depth = 0
    for j in range(i, len(toks)):
        t, spec = toks[j], specs[-1]
        whole = len(spec) >= 2 and ((spec[0].up in _PARTITION_OPS and spec[1].up in ("PARTITION", "TABLE"))
                                    or _is(spec, 0, "REMOVE", "PARTITIONING") or _is(spec, 0, "PARTITION", "BY"))
        if depth == 0 and not whole:
            if _punct(toks, j, ","):
                specs.append([])
                continue
            if spec and (_is(toks, j, "PARTITION", "BY") or _is(toks, j, "REMOVE", "PARTITIONING")):
                specs.append(spec := [])
        depth += 1 if _punct(toks, j, "(") else -1 if _punct(toks, j, ")") else 0
        spec.append(t)
    kind = "alter"
    for spec in specs:
        if spec and _spec(spec, ignore, target, found) == "rename":
            kind = "rename"
    if not any(specs):
        target.note(Effect.KEEPS_ROWS, "ALTER TABLE without a change")
    return found.statement(kind)


def _cascades(spec: list[_Tok]) -> bool:
    """Whether a foreign key's definition has ON DELETE or ON UPDATE CASCADE, SET NULL or SET DEFAULT."""
    return any(_is(spec, i, "ON") and i + 1 < len(spec) and spec[i + 1].up in ("DELETE", "UPDATE")
               and any(_is(spec, i + 2, *action) for action in (("CASCADE",), ("SET", "NULL"), ("SET", "DEFAULT")))
               for i in range(len(spec)))


def _spec(spec: list[_Tok], ignore: bool, target: _Found, found: _Gathered) -> str | None:
    """Notes what one ALTER TABLE specification does; "rename" when it renames the table."""
    head, second = spec[0].up, spec[1].up if len(spec) > 1 else ""
    text = _snippet(spec)
    keeps, changes = Effect.KEEPS_ROWS, Effect.CHANGES_ROWS
    if ignore and any(t.up in ("UNIQUE", "PRIMARY") for t in spec):
        target.note(changes, f"ALTER IGNORE … `{text}` deletes the rows that duplicate a key")
        return None
    if head in _PARTITION_OPS and second == "PARTITION" or head == "REMOVE" or (head, second) == ("PARTITION", "BY"):
        _partition_spec(spec, target, found)
    elif head in ("DISCARD", "IMPORT") and second == "TABLESPACE":
        target.note(changes, f"{head} TABLESPACE replaces the table's rows without row events")
    elif head == "CONVERT" and _is(spec, 1, "TABLE"):  # MariaDB: CONVERT TABLE t2 TO PARTITION p
        parts, _ = _read_name(spec, 2)
        target.note(changes, f"`{text}` moves the rows of another table in without row events")
        if not found.note(parts, changes, f"`{text}` moves its rows into a partition of another table"):
            target.note(Effect.UNKNOWN, f"`{text}`: the table moved is not read")
    elif head == "CONVERT" and second == "TO":
        charset = next((t.text.lower() for n, t in enumerate(spec) if n > 0 and spec[n - 1].up in ("SET", "CHARSET")
                        and t.up != "="), None)
        if charset is not None and charset != "default" and holds_every_character(charset, None):
            target.note(keeps, f"`{text}` converts text into a character set that holds every character: the "
                               "values' text is kept")
        else:
            target.note(changes, f"`{text}` converts every text value to the new character set")
    elif _is(spec, 0, "ADD", "SYSTEM", "VERSIONING") or _is(spec, 0, "ADD", "PERIOD"):
        target.note(Effect.UNKNOWN, f"`{text}` is not understood")
    elif head == "ADD" and second in _CONSTRAINTS and _cascades(spec):
        # From now on the server changes this table's rows itself when the parent's change, without row events
        # (the check refuses such a child from its next run on; ``core.foreign_keys``).
        target.note(changes, f"`{text}` makes the server change its rows without row events when the parent's "
                             "change (a foreign key with a cascading action)")
    elif head == "ADD" and second in _CONSTRAINTS:
        target.note(keeps, f"`{text}`: rows keep their values")
    elif head == "ADD":
        _add(spec, target)
    elif head == "DROP" and second in _CONSTRAINTS:
        target.note(keeps, f"`{text}`: rows keep their values")
    elif head == "DROP":
        i = _skip(spec, _skip(spec, 1, "COLUMN"), "IF EXISTS")
        parts, i = _read_name(spec, i)
        if len(parts) != 1 or _skip(spec, i, "RESTRICT", "CASCADE") != len(spec):
            target.note(Effect.UNKNOWN, f"`{text}` is not understood")
        else:
            target.dropped.append(parts[0])
            target.note(keeps, f"DROP COLUMN {parts[0]}: the other columns keep their values")
    elif head in ("MODIFY", "CHANGE"):
        i = _skip(spec, _skip(spec, 1, "COLUMN"), "IF EXISTS")
        old = None
        if head == "CHANGE":
            names, i = _read_name(spec, i)
            old = names[0] if len(names) == 1 else None
        column = _column(spec[i:])
        if isinstance(column, str) or (head == "CHANGE" and old is None):
            target.note(Effect.UNKNOWN, f"`{text}` is not understood{': ' + column if isinstance(column, str) else ''}")
        else:
            if old is not None and old.lower() != column.name.lower():
                target.renames.append((old, column.name))
            target.redefined.append(column)
            target.note(keeps, f"{head} {column.name}: values are kept if its new type holds them")
    elif head == "RENAME" and second == "COLUMN":
        before, i = _read_name(spec, _skip(spec, 2, "IF EXISTS"))
        after, i = _read_name(spec, i + 1) if _is(spec, i, "TO") else ([], i)
        if len(before) != 1 or len(after) != 1 or i != len(spec):
            target.note(Effect.UNKNOWN, f"`{text}` is not understood")
        else:
            target.renames.append((before[0], after[0]))
            target.note(keeps, f"RENAME COLUMN {before[0]} TO {after[0]}: values are kept")
    elif head == "RENAME" and second in ("INDEX", "KEY"):
        target.note(keeps, f"`{text}`: rows keep their values")
    elif head == "RENAME":
        parts, i = _read_name(spec, _skip(spec, 1, "TO", "AS"))
        reason = f"`{text}`: the table under the old and new names holds other rows, or none"
        target.note(changes, reason)
        if not found.note(parts, changes, reason) or i != len(spec):
            target.note(Effect.UNKNOWN, f"`{text}` is not understood")
        return "rename"
    elif head == "ALTER":
        i = _skip(spec, _skip(spec, 1, "COLUMN"), "IF EXISTS")
        i = _read_name(spec, i)[1] if second not in ("INDEX", "CHECK", "CONSTRAINT") else i + 2
        if _is(spec, i, "SET", "DEFAULT") or _is(spec, i, "DROP", "DEFAULT") or spec[-1].up in (
                "VISIBLE", "INVISIBLE", "ENFORCED"):
            target.note(keeps, f"`{text}`: rows keep their values")
        else:
            target.note(Effect.UNKNOWN, f"`{text}` is not understood")
    elif head in ("FORCE", "ENABLE", "DISABLE", "WITH", "WITHOUT") and not _is(spec, 1, "SYSTEM"):
        target.note(keeps, f"{text}: rows keep their values")
    elif (head, second) == ("ORDER", "BY"):
        target.note(keeps, "ORDER BY: rows keep their values")
    else:
        _table_options(spec, target)
    return None


def _partition_spec(spec: list[_Tok], target: _Found, found: _Gathered) -> None:
    head, text = spec[0].up, _snippet(spec)
    if head in _KEEPING_PARTITION_OPS or head in ("REMOVE", "PARTITION"):
        target.note(Effect.KEEPS_ROWS, f"`{text}`: the rows stay in the table")
    elif head in ("EXCHANGE", "CONVERT"):
        # EXCHANGE PARTITION p WITH TABLE t2; MariaDB's CONVERT PARTITION p TO TABLE t2
        at = next((j for j in range(len(spec)) if spec[j].up == "TABLE"), None)
        parts = _read_name(spec, at + 1)[0] if at is not None else []
        target.note(Effect.CHANGES_ROWS, f"`{text}` moves rows between tables without row events")
        if not found.note(parts, Effect.CHANGES_ROWS, f"`{text}` moves rows between tables without row events"):
            target.note(Effect.UNKNOWN, f"`{text}`: the other table is not read")
    else:  # DROP, TRUNCATE, DISCARD, IMPORT, REPAIR PARTITION
        target.note(Effect.CHANGES_ROWS, f"{head} PARTITION removes or replaces rows without row events")


def _add(spec: list[_Tok], target: _Found) -> None:
    i = _skip(spec, _skip(spec, 1, "COLUMN"), "IF NOT EXISTS")
    if _punct(spec, i, "(") and _group_end(spec, i) == len(spec):  # ADD COLUMN (c1 def, c2 def)
        pieces: list[list[_Tok]] = [[]]
        depth = 0
        for t in spec[i + 1:-1]:
            if depth == 0 and _punct([t], 0, ","):
                pieces.append([])
                continue
            depth += 1 if _punct([t], 0, "(") else -1 if _punct([t], 0, ")") else 0
            pieces[-1].append(t)
    else:
        pieces = [spec[i:]]
    for piece in pieces:
        column = _column(piece)
        if isinstance(column, str):
            target.note(Effect.UNKNOWN, f"`{_snippet(spec)}` is not understood: {column}")
            continue
        if column.name.lower() in (d.lower() for d in target.dropped):
            target.readded.append(column.name)
        target.added.append(column)
        why = ("its values are computed" if column.generated else "it numbers the rows" if column.auto_increment
               else "its default is an expression" if column.per_row_default else "")
        if why:
            target.note(Effect.CHANGES_ROWS, f"ADD COLUMN {column.name}: {why}, row by row, without row events")
        else:
            target.note(Effect.KEEPS_ROWS, f"ADD COLUMN {column.name}: existing rows keep their values")


def _table_options(spec: list[_Tok], target: _Found) -> None:
    """Table options, separated by spaces: ENGINE=InnoDB ROW_FORMAT=DYNAMIC COMMENT='x'."""
    i, text = 0, _snippet(spec)
    while i < len(spec):
        word = spec[i].up
        if word == "ENGINE":
            i = _skip(spec, i + 1, "=")
            engine = spec[i].text.lower() if i < len(spec) else ""
            if engine not in _ROW_KEEPING_ENGINES:
                target.note(Effect.UNKNOWN, f"ENGINE={engine}: that engine may not keep the rows")
            i += 1
            continue
        if word not in _TABLE_OPTIONS:
            target.note(Effect.UNKNOWN, f"`{text}` is not understood")
            return
        i = _skip(spec, i + 1, "SET", "DIRECTORY", "CHARACTER", "CHARSET", "COLLATE", "=")
        i = _group_end(spec, i) if _punct(spec, i, "(") else i + 1
    target.note(Effect.KEEPS_ROWS, f"`{text}`: rows keep their values")


# --- column definitions ----------------------------------------------------------------------------------------

_TYPE_WORDS = {"UNSIGNED", "SIGNED", "ZEROFILL", "PRECISION", "VARYING", "VARCHAR", "CHAR", "VARBINARY", "BINARY",
               "BYTE", "ASCII", "UNICODE", "CHARACTER"}
_SKIPPED_ATTRIBUTES = {"COMMENT": 1, "COLUMN_FORMAT": 1, "STORAGE": 1, "SRID": 1, "VISIBLE": 0, "INVISIBLE": 0,
                       "VIRTUAL": 0, "STORED": 0, "PERSISTENT": 0, "FIRST": 0, "AFTER": 1}
_NOW = {"CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP"}


def _column(toks: Sequence[_Tok]) -> ColumnDefinition | str:
    """The column defined by ``toks`` (name, type, attributes), or what in it is not understood."""
    if len(toks) < 2 or not toks[0].is_name or toks[1].kind != "word":
        return "no column name and type"
    i = 2
    while i < len(toks) and (_punct(toks, i, "(") or (toks[i].up in _TYPE_WORDS and not _is(toks, i, "CHARACTER",
                                                                                             "SET"))):
        i = _group_end(toks, i) if _punct(toks, i, "(") else i + 1
    kind = _render(toks[1:i])
    # SERIAL is BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE; SERIAL DEFAULT VALUE, the same for an integer type
    serial = toks[1].up == "SERIAL"
    not_null = auto_increment = unique = serial
    generated = per_row = False
    default = charset = collation = None
    while i < len(toks):
        word = toks[i].up
        if _is(toks, i, "SERIAL", "DEFAULT", "VALUE"):
            not_null = auto_increment = unique = True
            i += 3
        elif _is(toks, i, "NOT", "NULL"):
            not_null, i = True, i + 2
        elif word == "NULL":
            i += 1
        elif word == "DEFAULT":
            j = i + 1 + (1 if _punct(toks, i + 1, "-") or _punct(toks, i + 1, "+") else 0)
            j = j + 1 if j < len(toks) and toks[j].raw.token_type.name == "INTRODUCER" else j  # _utf8mb4'x'
            j = _group_end(toks, j) if _punct(toks, j, "(") else j + 1
            if _punct(toks, j, "("):
                per_row = per_row or toks[j - 1].up not in _NOW
                j = _group_end(toks, j)
            per_row = per_row or _punct(toks, i + 1, "(")
            if j > len(toks):
                return "DEFAULT without a value"
            default, i = _source(toks[i + 1:j]), j
        elif word == "AUTO_INCREMENT":
            auto_increment, i = True, i + 1
        elif word in ("AS", "GENERATED"):
            generated = True
            i = _skip(toks, i, "GENERATED ALWAYS", "GENERATED BY DEFAULT", "AS")
            i = _group_end(toks, i) if _punct(toks, i, "(") else _skip(toks, i, "ROW START", "ROW END", "IDENTITY")
        elif word in ("PRIMARY", "KEY", "UNIQUE"):
            unique, not_null = True, not_null or word != "UNIQUE"
            i = _skip(toks, i + 1, "KEY")
        elif word in ("CHARACTER", "CHARSET"):
            i = _skip(toks, i + 1, "SET")
            charset, i = (toks[i].text.lower(), i + 1) if i < len(toks) else (None, i)
        elif word == "COLLATE":
            collation, i = (toks[i + 1].text.lower(), i + 2) if i + 1 < len(toks) else (None, i + 1)
        elif _is(toks, i, "ON", "UPDATE"):
            i += 3
            i = _group_end(toks, i) if _punct(toks, i, "(") else i
        elif word in ("CHECK", "CONSTRAINT"):
            j = next((k for k in range(i, len(toks)) if _punct(toks, k, "(")), len(toks))
            i = _group_end(toks, j)
        elif word == "ENFORCED" or _is(toks, i, "NOT", "ENFORCED"):
            i += 1 if word == "ENFORCED" else 2
        elif word in ("WITH", "WITHOUT") and _is(toks, i + 1, "SYSTEM", "VERSIONING"):
            i += 3
        elif word in ("ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE", "COMPRESSED"):
            i = _skip(toks, i + 1, "=") + (1 if word != "COMPRESSED" or _punct(toks, i + 1, "=") else 0)
        elif word in _SKIPPED_ATTRIBUTES:
            i += 1 + _SKIPPED_ATTRIBUTES[word]
        else:
            return f"`{toks[i].text}` is not a column attribute this reads"
    if charset is None and collation is not None and collation != "binary":
        charset = collation.split("_")[0]
    return ColumnDefinition(toks[0].text, kind, not_null, default, generated, auto_increment, charset, collation,
                            unique, per_row)


def _render(toks: Sequence[_Tok]) -> str:
    """A type as text, lower-cased but for quoted members, spaced as information_schema writes it."""
    out = ""
    for t in toks:
        piece = "'" + t.text.replace("\\", "\\\\").replace("'", "''") + "'" if t.kind == "string" else t.text.lower()
        if out and piece not in ("(", ")", ",") and not out.endswith(("(", ",")):
            out += " "
        out += piece
    return out


# --- retyping --------------------------------------------------------------------------------------------------

_INTEGERS = {"tinyint": 1, "int1": 1, "bool": 1, "boolean": 1, "smallint": 2, "int2": 2, "mediumint": 3, "int3": 3,
             "middleint": 3, "int": 4, "integer": 4, "int4": 4, "bigint": 8, "int8": 8}
_TEXTS = {"tinytext": 255, "text": 65535, "mediumtext": 16777215, "long": 16777215, "long varchar": 16777215,
          "longtext": 4294967295}
_BLOBS = {"tinyblob": 255, "blob": 65535, "mediumblob": 16777215, "long varbinary": 16777215,
          "longblob": 4294967295}
_ALIASES = {"dec": "decimal", "numeric": "decimal", "fixed": "decimal", "real": "double", "double precision": "double",
            "float8": "double", "float4": "float", "character": "char", "character varying": "varchar",
            "char varying": "varchar"}
_TEXT_FAMILIES = ("char", "varchar", "text", "enum", "set")


@dataclass(frozen=True)
class _Type:
    base: str  # canonical: int, decimal, char, varchar, text, binary, varbinary, blob, enum, set, …
    size: int | None = None  # integer bytes, text/blob bytes, char/varchar characters, bit width, fraction digits
    scale: int = 0
    unsigned: bool = False
    members: tuple[str, ...] = ()


def _type(text: str) -> _Type | None:
    try:
        toks = _tokens(text)
    except _NotRead:
        return None
    words = [t.up for t in toks if t.kind == "word"]
    unsigned = "UNSIGNED" in words or "ZEROFILL" in words
    name = " ".join(w.lower() for w in words if w not in ("UNSIGNED", "SIGNED", "ZEROFILL"))
    name = _ALIASES.get(name, name)
    args = [t for t in toks if t.kind in ("number", "string")]
    if any(t.kind not in ("word", "number", "string") and t.text not in "()," for t in toks):
        return None
    numbers = [int(t.text) for t in args if t.kind == "number" and t.text.isdigit()]
    if len(numbers) != sum(t.kind == "number" for t in args):
        return None
    if name in _INTEGERS:
        return _Type("int", _INTEGERS[name], 0, unsigned)
    if name in ("enum", "set") and args and all(t.kind == "string" for t in args):
        return _Type(name, members=tuple(t.text for t in args))
    if any(t.kind == "string" for t in args) or len(numbers) > 2:
        return None
    if name == "decimal":
        size, scale = (numbers + [10, 0][len(numbers):])[:2]
        return _Type("decimal", size, scale, unsigned)
    if name in _TEXTS and not numbers:
        return _Type("text", _TEXTS[name])
    if name in _BLOBS and not numbers:
        return _Type("blob", _BLOBS[name])
    if name in ("char", "binary", "bit") and len(numbers) <= 1:
        return _Type(name, numbers[0] if numbers else 1)
    if name in ("varchar", "varbinary") and len(numbers) == 1:
        return _Type(name, numbers[0])
    if name in ("time", "datetime", "timestamp") and len(numbers) <= 1:
        return _Type(name, numbers[0] if numbers else 0)
    if name in ("float", "double") and not numbers:
        return _Type(name, unsigned=unsigned)
    if name == "year" and len(numbers) <= 1:
        return _Type(name)
    if name in ("date", "json", "geometry", "point", "linestring", "polygon") and not numbers:
        return _Type(name)
    return None


def _widens(old: _Type, new: _Type) -> bool:
    o, n = old.size or 0, new.size or 0
    if old.base == "int" == new.base:
        return (old.unsigned == new.unsigned and n >= o) or (old.unsigned and not new.unsigned and n > o)
    if old.base == "decimal" == new.base:
        return (not new.unsigned or old.unsigned) and new.scale >= old.scale and n - new.scale >= o - old.scale
    if old.base in ("enum", "set") and new.base == old.base:
        return new.members[:len(old.members)] == old.members
    if new.base == "text" and old.base in ("char", "varchar"):
        return 4 * o <= n  # at most four bytes a character
    if new.base == "blob" and old.base in ("binary", "varbinary", "blob"):
        return o <= n
    if old.base in ("char", "varchar") and new.base == "varchar" or old.base == "varbinary" == new.base:
        return n >= o
    if old.base == "binary" and new.base == "varbinary":  # the padding bytes stay part of the value
        return n >= o
    if old.base == new.base and old.base in ("char", "text", "bit", "time", "datetime", "timestamp"):
        return n >= o
    if (old.base, new.base) == ("float", "double"):
        return not new.unsigned or old.unsigned
    return old == new


def _canonical(text: str) -> str | None:
    try:
        return _render(_tokens(text))
    except _NotRead:
        return None


# Character sets that hold every character of any other: a conversion into them keeps each value's text.
_UNIVERSAL = frozenset({"utf8mb4", "utf16", "utf16le", "utf32"})
# Those that hold the Basic Multilingual Plane, and the sets with a character beyond it (the others fit in it).
_BMP = frozenset({"ucs2", "utf8mb3", "utf8"})
_BEYOND_BMP = _UNIVERSAL | {"gb18030"}


def holds_every_character(charset: str, old_charset: str | None) -> bool:
    """Whether converting text from ``old_charset`` (None: not known) into ``charset`` keeps every value's text."""
    new, old = charset.lower(), (old_charset or "").lower()
    if old == "binary":  # bytes read as text: not a conversion of text
        return False
    if new in _UNIVERSAL:
        return True
    return new in _BMP and bool(old) and old not in _BEYOND_BMP


def _same_charset(a: str | None, b: str | None) -> bool:
    def canonical(name: str) -> str:
        return "utf8mb3" if name == "utf8" else name

    return a is None or b is None or canonical(a.lower()) == canonical(b.lower())


def retyping_keeps_values(old_type: str, new: ColumnDefinition, old_not_null: bool | None, *,
                          old_charset: str | None = None, table_charset: str | None = None,
                          old_auto_increment: bool | None = None) -> tuple[bool, str]:
    """Whether redefining a column of ``old_type`` (information_schema's COLUMN_TYPE) as ``new`` keeps every value
    it may hold exactly, and why (a phrase that reads after "which": "narrows …").

    Character sets are compared when known: the new definition's (or the table's default, ``table_charset``, when
    it names none) against ``old_charset``; when neither side is known they are taken to be the same."""
    old, into = _type(old_type), _type(new.type)
    same = _canonical(old_type) == _canonical(new.type)
    if (old is None or into is None) and not same:
        unread = old_type if old is None else new.type
        return False, f"is not known to keep every value: the type `{unread}` is not one this reads"
    if new.generated:
        return False, "makes it a generated column: its values are computed again"
    if new.auto_increment and old_auto_increment is not True:
        return False, "makes it AUTO_INCREMENT: its NULL and 0 values are numbered"
    if new.not_null and old_not_null is not True:
        return False, "makes it NOT NULL while it may hold NULL, which the server replaces"
    # An ENUM or SET holds a member's number; its members' text is the definition's own, in any character set.
    members = into is not None and old is not None and into.base in ("enum", "set") and old.base == into.base
    if (into is None or old is None or into.base in _TEXT_FAMILIES) and not members:
        charset = new.charset or table_charset
        if charset is not None and holds_every_character(charset, old_charset):
            pass  # the server converts the text, and Hive holds text: the values are the same
        elif new.charset is not None and old_charset is None:
            return False, f"sets CHARACTER SET {new.charset} while the column's character set before is not known"
        elif not _same_charset(old_charset, charset):
            return False, f"changes its character set from {old_charset} to {charset}: values are converted"
    if not same and (old is None or into is None or not _widens(old, into)):
        return False, f"does not hold every value `{old_type}` holds (a narrower type, another sign or another kind)"
    return True, f"holds every value `{old_type}` holds"


# --- statements not read ---------------------------------------------------------------------------------------


def may_name(query: str, schema: str, table: str) -> bool:
    """Whether a statement that was not understood could name ``schema``.``table`` (erring on yes).

    A name that matches is ruled out only when another schema qualifies it; a string holding the name counts (a
    statement may carry SQL in a string)."""
    wanted, schema = table.lower(), schema.lower()
    try:
        toks = _tokens(query or "")
    except _NotRead:
        raw = (query or "").lower()
        return wanted in raw or wanted.replace("`", "``") in raw
    for n, t in enumerate(toks):
        if t.kind == "string" and wanted in t.text.lower():
            return True
        if t.kind in ("word", "name", "string") and t.text.lower() == wanted:
            qualified = n >= 2 and _punct(toks, n - 1, ".") and toks[n - 2].is_name
            if not qualified or toks[n - 2].text.lower() == schema:
                return True
    return False
