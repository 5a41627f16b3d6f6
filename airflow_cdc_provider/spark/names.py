"""Column names in the Spark jobs: every reference a column object from the quoted name, every DDL name quoted.

MySQL allows nearly any character in a column name (a dot, a backtick, a space, a quote, a parenthesis), and
``col("a.b")`` reads the dot as a struct field, a backtick as the start of a quoted part. Quoted, the name is
only ever a name: never parsed as an expression, never SQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_cdc_provider.core.identifiers import backticked


def column(name: str) -> Any:
    """The column ``name`` of a frame, as it is spelt there, whatever it holds."""
    from pyspark.sql.functions import col

    return col(backticked(name))


def columns_ddl(columns: Iterable[tuple[str, str]]) -> str:
    """``name type, …`` for CREATE TABLE and ADD COLUMNS; the types are the type map's (``core.types``)."""
    return ", ".join(f"{backticked(name)} {hive}" for name, hive in columns)


def path_literal(text: str) -> str:
    """A location as it goes between the quotes of a statement's LOCATION: refused if it holds a quote or a
    backslash, which no warehouse path needs."""
    if "'" in text or "\\" in text:
        raise ValueError(f"The path {text!r} holds a quote or a backslash; choose a warehouse_dir without them.")
    return text
