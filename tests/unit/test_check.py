"""What the check finds of a source's tables (``stages.check.inspect``), over a source that answers from memory: a
named table that cannot be captured is stopped with its reason while the others go on, the child of a cascading
foreign key is captured by a diff unless its entry insists on the binlog, and what stops every table is refused."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pytest

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.core.contract import RefusedTable
from airflow_cdc_provider.core.errors import CaptureNotPossible, CdcError, TableNotFound
from airflow_cdc_provider.core.foreign_keys import ForeignKeyColumn
from airflow_cdc_provider.core.grants import CaptureGrants
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.stages.check import CheckDefaults, how_captured, inspect

COLUMNS = (("id", "int(11)"), ("parent_id", "int(11)"), ("at", "datetime"))


class Source:
    """A source server's answers: its tables (each with its key), its foreign keys, the tables the capture user may
    not read, and what stops every table."""

    def __init__(self, keys: Mapping[str, tuple[str, ...]], cascading: Iterable[tuple[str, str]] = (),
                 unreadable: Iterable[str] = (), refused: CaptureNotPossible | None = None):
        self.keys = {TableName.parse(name): key for name, key in keys.items()}
        self.cascading = [(TableName.parse(child), TableName.parse(parent)) for child, parent in cascading]
        self.unreadable, self.refused = {TableName.parse(name) for name in unreadable}, refused
        self.binlog: bool | None = None  # what the check asked of the privileges

    def base_tables(self, schemas: Iterable[str] | None = None) -> list[TableName]:
        return sorted(t for t in self.keys if schemas is None or t.schema in set(schemas))

    def raw_headers(self, tables: Sequence[TableName], declared: Mapping[TableName, Sequence[str]] | None = None
                    ) -> Mapping[TableName, RawHeader | CdcError]:
        return {t: RawHeader(str(t), COLUMNS, self.keys[t]) if t in self.keys else TableNotFound(f"The table {t} "
                "does not exist, or the capture user cannot see it.") for t in tables}

    def foreign_key_columns(self, tables: Iterable[TableName]) -> list[ForeignKeyColumn]:
        asked = set(tables)
        return [ForeignKeyColumn(child.schema, f"fk_{child.table}", child.schema, child.table, "parent_id", 1,
                                 parent.schema, parent.table, "id", "RESTRICT", "CASCADE")
                for child, parent in self.cascading if child in asked]

    def check_capture(self, tables: Iterable[TableName] = (), binlog: bool = True) -> CaptureGrants:
        self.binlog = binlog
        if self.refused is not None:
            raise self.refused
        return CaptureGrants(warnings=[], unreadable={t: f"The user lacks SELECT on {t}." for t in tables
                                                      if t in self.unreadable})

    def binlog_notes(self) -> list[str]:
        return []


def check(source: Source, *entries: str | dict, capture: str = "binlog"):
    config = CdcConfig.from_dict({"source": {"mysql_conn_id": "m", "capture": capture}, "work": {"dir": "/w"},
                                  "hive": {"warehouse_dir": "/wh"}, "tables": list(entries)})
    return inspect(source, config.tables, CheckDefaults(hive=config.hive, schema_changes="strict",
                                                        capture=capture), {})


def test_a_named_table_that_cannot_be_captured_is_stopped_with_its_reason_and_the_others_go_on():
    source = Source({"shop.orders": ("id",), "shop.parts": ("id",), "shop.seen": ("id",), "shop.fine": ("id",)},
                    unreadable=["shop.seen"])
    found = check(source, "shop.orders", "shop.missing", {"source": "shop.parts", "partition_by": "day(nothing)"},
                  "shop.seen", {"source": "shop.fine", "target": "fine_copy"})
    assert found.refused is None
    assert [t.source for t in found.captured] == ["shop.fine", "shop.orders"]
    stopped = {t.source: t for t in found.stopped}
    assert sorted(stopped) == ["shop.missing", "shop.parts", "shop.seen"]
    assert stopped["shop.missing"] == RefusedTable(
        source="shop.missing", hive_table="ods.shop_missing",
        reason="The table shop.missing does not exist, or the capture user cannot see it.")
    assert "nothing" in stopped["shop.parts"].reason and stopped["shop.parts"].hive_table == "ods.shop_parts"
    assert stopped["shop.seen"].reason == "The user lacks SELECT on shop.seen."
    assert found.skipped == []


def test_a_pattern_leaves_out_what_it_cannot_capture_where_a_named_entry_stops_it():
    source = Source({"shop.orders": ("id",), "shop.seen": ("id",)}, unreadable=["shop.seen"])
    found = check(source, "shop.*")
    assert [t.source for t in found.captured] == ["shop.orders"] and found.stopped == []
    assert [(t.source, t.reason) for t in found.skipped] == [("shop.seen", "The user lacks SELECT on shop.seen.")]


def test_a_stopped_shard_keeps_the_shard_its_entry_makes_it():
    found = check(Source({}), {"source": "shop_3.orders", "target": "orders", "shards": True})
    (stopped,) = found.stopped
    assert (stopped.hive_table, stopped.shard.path, stopped.table_dir("/w").root) == (
        "ods.orders", "shop_3/orders", "/w/ods.orders/shards/shop_3/orders")


@pytest.mark.parametrize("entry", [{"source": "shop.lines"}, {"source": "shop.*"}])
def test_the_child_of_a_cascading_foreign_key_is_captured_by_a_diff_when_its_entry_does_not_set_capture(entry):
    source = Source({"shop.orders": ("id",), "shop.lines": ("id",)}, cascading=[("shop.lines", "shop.orders")])
    found = check(source, entry, "shop.orders")
    ways = {t.source: (t.capture, t.cascades) for t in found.captured}
    assert ways == {"shop.orders": ("binlog", ()), "shop.lines": (
        "diff", ("`fk_lines` (parent_id) REFERENCES shop.orders (id) ON DELETE CASCADE",))}
    assert found.stopped == [] and found.skipped == [] and found.binlog
    lines = next(t for t in found.captured if t.source == "shop.lines")
    assert how_captured(lines) == (
        "key id, by a diff with its last version's row digests (capture: diff), since it is the child of a foreign "
        "key with a cascading action (`fk_lines` (parent_id) REFERENCES shop.orders (id) ON DELETE CASCADE): the "
        "server changes its rows for those without a row event in the binlog, and a diff is exact for it")


def test_the_child_of_a_cascading_foreign_key_whose_entry_sets_capture_binlog_is_stopped():
    source = Source({"shop.orders": ("id",), "shop.lines": ("id",)}, cascading=[("shop.lines", "shop.orders")])
    found = check(source, {"source": "shop.lines", "capture": "binlog"}, "shop.orders")
    assert [t.source for t in found.captured] == ["shop.orders"]
    (stopped,) = found.stopped
    assert stopped.source == "shop.lines" and "Its entry sets `capture: binlog`: remove that" in stopped.reason
    # Set on a pattern, it leaves the child out; the others it matches go on.
    found = check(source, {"source": "shop.*", "capture": "binlog"})
    assert [t.source for t in found.captured] == ["shop.orders"]
    assert [t.source for t in found.skipped] == ["shop.lines"] and found.stopped == []


def test_when_every_table_read_from_the_binlog_turns_to_a_diff_the_binlog_is_not_asked_for():
    tables = {"shop.orders": ("id",), "shop.lines": ("id",), "shop.log": ()}
    source = Source(tables, cascading=[("shop.lines", "shop.orders")])
    found = check(source, "shop.lines", "shop.log", {"source": "shop.orders", "capture": "diff"})
    assert {t.source: t.capture for t in found.captured} == {"shop.orders": "diff", "shop.log": "diff",
                                                             "shop.lines": "diff"}
    assert not found.binlog and source.binlog is False, "its settings and privileges are not asked for"
    # One table still read from the binlog: they count.
    source = Source({**tables, "shop.other": ("id",)}, cascading=[("shop.lines", "shop.orders")])
    found = check(source, "shop.lines", "shop.log", {"source": "shop.orders", "capture": "diff"}, "shop.other")
    assert found.binlog and source.binlog is True


def test_what_stops_every_table_is_refused_as_a_whole():
    refused = CaptureNotPossible(["The server setting binlog_format is 'STATEMENT'."])
    found = check(Source({"shop.orders": ("id",)}, refused=refused), "shop.orders", "shop.missing")
    assert found.refused is refused
    assert [t.source for t in found.stopped] == ["shop.missing"], "the tables' own problems are listed too"
