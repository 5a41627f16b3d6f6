"""Where a capture goes on in a server's binlog, or why it cannot: every kind, decided from facts alone."""

import pytest

from airflow_cdc_provider.core.errors import WatermarkNotReadable
from airflow_cdc_provider.core.gtid import GtidPositionLost
from airflow_cdc_provider.core.resume import (
    BinlogFacts,
    BinlogFile,
    Unreadable,
    UnreadableKind,
    needs_gtid_search,
    read_position,
    read_positions,
)
from airflow_cdc_provider.core.watermark import Watermark

FILES = (BinlogFile("binlog.000003", 5000), BinlogFile("binlog.000004", 800))
RETENTION = (("binlog_expire_logs_seconds", "86400"), ("expire_logs_days", "1.000000"))
HERE = Watermark("binlog.000004", 800, server_id=1, gtid="0-1-20")  # the server's position now


def facts(current=HERE, files=FILES, found=None):
    return BinlogFacts(current, files, RETENTION, found or {})


def test_a_watermark_of_this_server_in_a_kept_file_is_read_from_itself():
    for watermark in (Watermark("binlog.000003", 4, 1), Watermark("binlog.000004", 800, 1, gtid="0-1-20")):
        assert read_position(watermark, facts()) == watermark
    assert not needs_gtid_search(Watermark("binlog.000003", 4, 1, gtid="0-1-3"), HERE)


def test_a_purged_file_names_the_file_the_files_kept_and_the_retention():
    old = Watermark("binlog.000002", 120, 1, gtid="0-1-9")
    found = read_position(old, facts())
    assert isinstance(found, Unreadable) and found.kind is UnreadableKind.PURGED and found.kind == "purged"
    assert found.reason == (
        "The binlog file binlog.000002 of the watermark binlog.000002:120 gtid=0-1-9 is no longer on the server "
        "(it keeps binlog.000003 … binlog.000004): it was purged. The server's retention setting is "
        "binlog_expire_logs_seconds=86400, expire_logs_days=1.000000.")
    assert found.way_on.startswith("Set `on_purged_binlog: heal`") and "fresh_snapshot=true" in found.way_on
    assert "on_purged_binlog: snapshot" in found.way_on and "keep binlogs longer" in found.way_on
    assert found.message == f"{found.reason} {found.way_on}"
    with pytest.raises(WatermarkNotReadable, match="binlog.000002 of the watermark"):
        raise found.error()


def test_a_file_missing_though_not_older_than_the_kept_ones_is_not_said_to_be_purged():
    # A file after the last one kept: the binlog was reset, or the watermark is of a server that went.
    gone = Watermark("binlog.000009", 4, 1)
    found = read_position(gone, facts())
    assert found.kind is UnreadableKind.PURGED
    assert "(it keeps binlog.000003 … binlog.000004). The server" in found.reason
    assert "it was purged" not in found.reason
    assert "(it keeps no binlog files): it was purged" in read_position(gone, facts(files=())).reason


def test_a_position_past_the_end_of_its_file_does_not_belong_to_this_server():
    found = read_position(Watermark("binlog.000003", 9000, 1), facts())
    assert found.kind is UnreadableKind.PAST_END
    assert found.message == ("The watermark binlog.000003:9000 is past the end of binlog.000003, which has 5000 "
                             "bytes: it does not belong to this server's binlog.")
    assert found.way_on == ""


@pytest.mark.parametrize(("watermark", "current", "without"), [
    (Watermark("binlog.000005", 300, 11), HERE, "the watermark has"),
    (Watermark("binlog.000005", 300, 11, gtid="0-11-4"), Watermark("binlog.000004", 800, 1), "this server has"),
    # A MySQL watermark (it has a server uuid) on a MariaDB server: the GTIDs are of two kinds.
    (Watermark("binlog.000005", 300, 11, gtid="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
               server_uuid="3e11fa47-71ca-11e1-9e33-c80aa9429562"), HERE, "this server has"),
])
def test_another_server_without_gtids_on_both_sides_cannot_be_followed(watermark, current, without):
    assert not needs_gtid_search(watermark, current)
    found = read_position(watermark, facts(current=current))
    assert found.kind is UnreadableKind.SERVER
    for part in (f"taken on server id {watermark.server_id}", f"this server is id {current.server_id}",
                 f"with binlog {current.file}", f"{without} no GTID position", "gtid_mode=ON"):
        assert part in found.reason, (part, found.reason)
    assert "Trigger a run" not in found.reason
    assert found.way_on == ("Trigger a run with fresh_snapshot=true, or set `on_server_change: snapshot` to take one "
                            "in such a run.")


def test_another_servers_watermark_is_read_from_its_gtid_position_here():
    old = Watermark("binlog.000007", 900, server_id=11, gtid="0-11-12")
    assert needs_gtid_search(old, HERE)
    there = Watermark("binlog.000003", 2750, 1, gtid="0-11-12")
    assert read_position(old, facts(found={old: there})) == there
    # Found in a file that is gone by the time it is read, or past the end of one: as for a watermark of here.
    assert read_position(old, facts(found={old: Watermark("binlog.000001", 4, 1)})).kind is UnreadableKind.PURGED
    past = read_position(old, facts(found={old: Watermark("binlog.000004", 900, 1)}))
    assert past.kind is UnreadableKind.PAST_END and past.at.file == "binlog.000004"


def test_a_gtid_position_lost_here_is_purged_or_diverged():
    old = Watermark("binlog.000007", 900, server_id=11, gtid="0-11-12")
    purged = read_position(old, facts(found={old: GtidPositionLost("purged", "The binlog begins after it.")}))
    assert purged.kind is UnreadableKind.PURGED
    assert purged.reason == ("The watermark binlog.000007:900 gtid=0-11-12 was taken on server id 11 (uuid None), but "
                             "this server is id 1 (uuid None) with binlog binlog.000004, and its GTID 0-11-12 was "
                             "looked for there. The binlog begins after it.")
    assert "on_purged_binlog: snapshot" in purged.way_on
    diverged = read_position(old, facts(found={old: GtidPositionLost("diverged", "It lacks 0-11-12.")}))
    assert diverged.kind is UnreadableKind.DIVERGED and diverged.reason.endswith("looked for there. It lacks 0-11-12.")
    assert diverged.way_on == ("Trigger a run with fresh_snapshot=true (or set `on_server_change: snapshot` to take "
                               "one in such a run).")


def test_a_gtid_position_not_looked_for_is_a_mistake_of_the_caller():
    with pytest.raises(ValueError, match="was not looked for"):
        read_position(Watermark("binlog.000007", 900, server_id=11, gtid="0-11-12"), facts())


def test_many_watermarks_are_decided_from_one_set_of_facts():
    ok, old = Watermark("binlog.000004", 10, 1), Watermark("binlog.000001", 10, 1)
    found = read_positions([ok, old, ok], facts())
    assert found[0] == ok == found[2] and found[1].kind is UnreadableKind.PURGED
    assert {kind.value for kind in UnreadableKind} == {"server", "diverged", "purged", "past_end"}
