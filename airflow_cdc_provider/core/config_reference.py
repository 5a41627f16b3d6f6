"""The reference of every configuration key, made from the model (``core.config``): ``docs/configuration.md``.

    python -m airflow_cdc_provider.core.config_reference > docs/configuration.md
"""

from __future__ import annotations

import sys
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from airflow_cdc_provider.core.config import LEGACY_KEYS, SECTIONS, TableEntry, TableSettings

COMMAND = "python -m airflow_cdc_provider.core.config_reference > docs/configuration.md"


def type_name(annotation: Any) -> str:
    """A field's type as the YAML writes it."""
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) is list:
        return f"list of {type_name(typing.get_args(annotation)[0])}s"
    if typing.get_origin(annotation) is dict:
        return "mapping of settings"
    return {int: "integer", float: "number", bool: "boolean", str: "string", type(None): "null"}[annotation]


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "null" if field.annotation is not type(None) else ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`"


def _type(field: FieldInfo) -> str:
    """A field's type, or the words its ``type`` gives when its annotation is not how the YAML writes it (a
    ``changelog:``, read from `true` or a mapping)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return str(extra.get("type") or type_name(field.annotation))


def _limits(field: FieldInfo) -> str:
    least = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), None)
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    choices, keys = extra.get("choices") or {}, extra.get("keys") or {}
    if not isinstance(choices, dict) or not isinstance(keys, dict):
        raise TypeError(f"choices and keys of {field} must be mappings of each choice or key to its meaning")
    parts = [f">= {least}"] if least is not None else []
    parts += [f"`{c}`: {meaning}" for c, meaning in choices.items()]
    parts += [f"`{k}:` {meaning}" for k, meaning in keys.items()]
    return "; ".join(parts)


def _per_table(field: FieldInfo) -> str:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    per_table = extra.get("per_table")
    if not per_table:
        return "no"
    key, _, note = str(per_table).partition(" ")
    return f"yes: `{key}:` {note}".rstrip()


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _rows(model: type[BaseModel], section: str | None) -> list[str]:
    flat = {v: k for k, v in LEGACY_KEYS.items()}
    rows = (["| key | type | default | limits | per table | meaning |", "|---|---|---|---|---|---|"] if section
            else ["| key | type | limits | meaning |", "|---|---|---|---|"])
    for name, field in model.model_fields.items():
        key = f"`{name}`"
        if section and (section, name) in flat:
            written = flat[section, name]
            key += " (also at the top level)" if written == name else f" (or `{written}` at the top level)"
        cells = [key, _type(field)]
        cells += [_default(field)] if section else []
        cells += [_escape(_limits(field))]
        cells += [_per_table(field)] if section else []
        cells += [_escape(field.description or "")]
        rows.append(f"| {' | '.join(cells)} |")
    return rows


def reference() -> str:
    """``docs/configuration.md``: every key of every section, and of a table entry."""
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Made from airflow_cdc_provider/core/config.py; do not edit. Regenerate with: {COMMAND} -->",
        "",
        f"Regenerate this page from the model with `{COMMAND}`; a unit test fails when the two differ.",
        "",
        ("The configuration is a YAML file (the example DAG reads `dags/cdc_config.yaml`, or the file `CDC_CONFIG` "
         "names) with one mapping per section below and a `tables:` list. Every key is optional except `tables:`, "
         "`work: dir:` and `hive: warehouse_dir:` (the work directory and the warehouse: see "
         "[security.md](security.md)). "
         "A key the model does not know, or a value it refuses, fails the DAG's parsing with a message naming the "
         "key, the file, the value and what it must be."),
        "",
        ("The flat keys of earlier versions (`mysql_conn_id:`, `work_dir:`, `keep_versions:`…) are still read, "
         "each into its section as the tables below say; a file may not set a key both ways."),
        "",
        ("Spark settings (`spark:` `conf`, `merge_conf`, `verify_conf`, and a table's `spark_conf`) go on "
         "spark-submit's command line as `--conf key=value`: a key that carries a credential (`password`, "
         "`secret`, `token`, `access.key`…) is refused. Credentials belong in the Spark connection, an instance "
         "role, or the cluster's own `spark-defaults.conf`. The settings the merge and verify tasks make from "
         "`hive:` (`spark.sql.warehouse.dir`, `spark.hadoop.hive.metastore.uris`, "
         "`spark.sql.catalogImplementation`, `spark.sql.session.timeZone`) cannot be given. See "
         "[deployment.md](deployment.md#spark-settings)."),
    ]
    for section, model in SECTIONS.items():
        summary = (model.__doc__ or "").strip().splitlines()[0].replace("``", "`")
        lines += ["", f"## `{section}:`", "", summary, "", *_rows(model, section)]
    lines += ["", "## `tables:`", "",
              ("A list of entries, each a table by name or a pattern selecting many, resolved at each run; a plain "
               "string is the entry's `source`. A table named on its own takes its entry's keys even when a "
               "pattern matches it too; among patterns the first that matches wins. Tables that would land in one "
               "Hive table (Hive names ignore case) are reported and left out, all but a named one or the one the "
               "last run copied there; two named ones are refused. An entry needs `source` or "
               "`regex`; the keys of a table entry apply to that table, or to each table the pattern selects."), "",
              *_rows(TableEntry, None), *_rows(TableSettings, None)[2:]]  # one table: the header once
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
