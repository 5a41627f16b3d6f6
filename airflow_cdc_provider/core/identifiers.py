"""Validated, quoted SQL identifiers: the only way a schema, table or column name reaches a statement."""

from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_cdc_provider.core.errors import InvalidIdentifier

# MySQL and MariaDB limit identifiers to 64 characters and forbid NUL, characters outside the Basic
# Multilingual Plane and trailing spaces (https://dev.mysql.com/doc/refman/8.4/en/identifiers.html).
MAX_IDENTIFIER_LENGTH = 64


def validate_identifier(name: str, what: str = "identifier") -> str:
    """Return ``name`` unchanged when MySQL would accept it as an identifier, else raise InvalidIdentifier."""
    if not isinstance(name, str) or not name:
        raise InvalidIdentifier(f"The {what} {name!r} is empty or not a string: give a non-empty name.")
    problem = None
    if len(name) > MAX_IDENTIFIER_LENGTH:
        problem = f"is {len(name)} characters long; MySQL allows at most {MAX_IDENTIFIER_LENGTH}"
    elif "\x00" in name:
        problem = "contains a NUL character"
    elif any(ord(ch) > 0xFFFF for ch in name):
        problem = "contains a character outside the Basic Multilingual Plane, which MySQL forbids in names"
    elif name.endswith(" "):
        problem = "ends with a space, which MySQL forbids in names"
    if problem:
        raise InvalidIdentifier(f"The {what} {name!r} {problem}: check the name in the configuration.")
    return name


# fullmatch, not match with `$`: `$` also matches before a trailing newline, which would let "t\n" through.
_HIVE_NAME = re.compile(r"[A-Za-z0-9_]{1,128}")


def validate_hive_name(name: str, what: str = "Hive name") -> str:
    """A Hive database or table name, lower-cased as the metastore keeps it; Hive allows letters, digits, _."""
    if not isinstance(name, str) or not _HIVE_NAME.fullmatch(name):
        raise InvalidIdentifier(
            f"The {what} {name!r} is not a valid Hive name: use 1 to 128 letters, digits and underscores."
        )
    return name.lower()


def backticked(name: str) -> str:
    """``name`` between backticks, a backtick inside it doubled: a quoted identifier as MySQL and Spark SQL both read
    it, whatever the name holds (dots, spaces, quotes, parentheses). The Spark jobs quote every column name with
    it, in DDL and in column references; on the server, ``quote_identifier`` adds MySQL's own checks."""
    return "`" + name.replace("`", "``") + "`"


def quote_identifier(name: str) -> str:
    """Quote a validated name with backticks, doubling any backtick inside it."""
    validate_identifier(name)
    return backticked(name)


def formatted(sql: str) -> str:
    """A piece of SQL without placeholders, made ready for a statement run with arguments: PyMySQL formats such a
    statement with ``%``, so its own ``%`` are doubled. A quoted name may hold one (MySQL allows it)."""
    return sql.replace("%", "%%")


# Spark and the metastore take any name (Spark 4.2 on Hive 2.3 created, wrote and read a table with columns
# `a,b`, `a:b;c` and one holding a line feed), but Hive's own readers get a table's column names as one
# comma-separated list (the serde's `columns` property): there a comma splits the name and shifts every column
# after it. A Hive table is read by Hive too, so a comma is refused.
_HIVE_REFUSED = {",": "a comma"}


def hive_column_problem(name: str) -> str | None:
    """Why a Hive table cannot hold a column of this name, or None when it can (any other character MySQL allows
    is carried as it is, lower-cased)."""
    found = [f"{what} ({char!r})" for char, what in _HIVE_REFUSED.items() if char in name]
    return f"holds {' and '.join(found)}, which a Hive table's column name cannot hold" if found else None


def split_qualified(text: str) -> list[tuple[str, bool]]:
    """Split ``a.b`` on unquoted dots into (name, quoted) pairs; backtick-quoted parts may hold dots and doubled
    backticks. ``quoted`` tells a caller that the part was written as a literal (a pattern's glob never is)."""
    parts: list[tuple[str, bool]] = []
    current: list[str] = []
    i, quoted, was_quoted = 0, False, False
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "`":
                if text[i + 1 : i + 2] == "`":
                    current.append("`")
                    i += 1
                else:
                    quoted = False
            else:
                current.append(ch)
        elif ch == "`" and not current and not was_quoted:
            quoted = was_quoted = True
        elif ch == ".":
            parts.append(("".join(current), was_quoted))
            current, was_quoted = [], False
        elif was_quoted:
            raise InvalidIdentifier(f"Unexpected {ch!r} after a quoted name in {text!r}.")
        else:
            current.append(ch)
        i += 1
    if quoted:
        raise InvalidIdentifier(f"Unclosed backtick in {text!r}.")
    parts.append(("".join(current), was_quoted))
    return parts


@dataclass(frozen=True, order=True)
class TableName:
    """A source table, always qualified by its schema: names alone are ambiguous across schemas."""

    schema: str
    table: str

    def __post_init__(self) -> None:
        validate_identifier(self.schema, "schema name")
        validate_identifier(self.table, "table name")

    @classmethod
    def parse(cls, text: str) -> TableName:
        """Parse ``schema.table`` (parts may be backtick-quoted), as written in the configuration."""
        if not isinstance(text, str):
            raise InvalidIdentifier(f"The table {text!r} is not a string: write it as schema.table.")
        parts = [name for name, _ in split_qualified(text.strip())]
        if len(parts) != 2:
            raise InvalidIdentifier(
                f"The table {text!r} is not of the form schema.table: name its schema too, "
                "for example shop.orders (quote a name holding a dot with backticks)."
            )
        return cls(parts[0], parts[1])

    @property
    def quoted(self) -> str:
        return f"{quote_identifier(self.schema)}.{quote_identifier(self.table)}"

    def __str__(self) -> str:
        """``schema.table``; a part holding a dot or backtick is quoted, so that ``parse(str(t)) == t``, and so is
        one holding ``*``, ``?`` or ``[``, which the configuration would otherwise read as a pattern."""
        return ".".join(
            "`" + part.replace("`", "``") + "`" if any(ch in part for ch in ".`*?[") else part
            for part in (self.schema, self.table)
        )
