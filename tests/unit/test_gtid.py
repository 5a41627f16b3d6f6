import pytest

from airflow_cdc_provider.core.errors import InvalidWatermark
from airflow_cdc_provider.core.gtid import MariaDbGtidPos, MySqlGtidSet, canonical_gtid

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "2174b383-5441-11e8-b90a-c80aa9429562"


def test_mariadb_position_is_sorted_by_domain():
    assert str(MariaDbGtidPos.parse("1-2-5, 0-1-17")) == "0-1-17,1-2-5"
    assert str(MariaDbGtidPos.parse("")) == ""


def test_mariadb_covers():
    later, earlier = MariaDbGtidPos.parse("0-1-20,1-2-5"), MariaDbGtidPos.parse("0-1-17")
    assert later.covers(earlier)
    assert not earlier.covers(later)


@pytest.mark.parametrize("bad", ["0-1", "a-b-c", "0-1-2,0-1-3"])
def test_mariadb_bad_positions(bad):
    with pytest.raises(InvalidWatermark):
        MariaDbGtidPos.parse(bad)


def test_mysql_set_is_canonical_whatever_the_server_printed():
    printed = f"{UUID_B.upper()}:1-2,\n{UUID_A}:11-18:1-5:6"
    assert str(MySqlGtidSet.parse(printed)) == f"{UUID_B}:1-2,{UUID_A}:1-6:11-18"


def test_mysql_tagged_gtids():
    assert str(MySqlGtidSet.parse(f"{UUID_A}:1-3,{UUID_A}:etl:1-2")) == f"{UUID_A}:1-3,{UUID_A}:etl:1-2"


def test_mysql_covers():
    big = MySqlGtidSet.parse(f"{UUID_A}:1-100,{UUID_B}:1-5")
    assert big.covers(MySqlGtidSet.parse(f"{UUID_A}:3-7"))
    assert not big.covers(MySqlGtidSet.parse(f"{UUID_B}:6"))
    assert not MySqlGtidSet.parse(f"{UUID_A}:1-5:7-9").covers(MySqlGtidSet.parse(f"{UUID_A}:5-7"))


@pytest.mark.parametrize("bad", ["nope:1-5", f"{UUID_A}", f"{UUID_A}:5-3", f"{UUID_A}:0-3", f"{UUID_A}:1-x"])
def test_mysql_bad_sets(bad):
    with pytest.raises(InvalidWatermark):
        MySqlGtidSet.parse(bad)


def test_canonical_gtid():
    assert canonical_gtid(None, mariadb=True) is None
    assert canonical_gtid("", mariadb=False) is None
    assert canonical_gtid("0-1-5", mariadb=True) == "0-1-5"


def test_a_mariadb_position_becomes_a_file_and_offset_on_another_server():
    from airflow_cdc_provider.core.gtid import (
        GtidFile,
        GtidPositionLost,
        mariadb_event_gtid,
        mariadb_gtid_list,
        start_after,
    )

    # As a promoted replica lists them (SHOW BINLOG EVENTS): the primary's GTIDs 0-1-N, then its own 0-2-N, in
    # its own files and offsets; its second file's Gtid_list names domain 0 once per server.
    assert mariadb_event_gtid("BEGIN GTID 0-1-6") == (0, 1, 6) and mariadb_event_gtid("GTID 0-1-1 cid=12") == (0, 1, 1)
    assert mariadb_event_gtid("COMMIT /* xid=20 */") is None
    assert mariadb_gtid_list("[0-1-12,0-2-14,1-3-2]") == ((0, 1, 12), (0, 2, 14), (1, 3, 2))
    files = [GtidFile.mariadb("binlog.000001", "[]", [
                 (256, "[]"), (325, "GTID 0-1-1"), (926, "BEGIN GTID 0-1-5"), (1171, "BEGIN GTID 0-1-6"),
                 (1414, "BEGIN GTID 0-1-7"), (1700, "BEGIN GTID 0-2-8")]),
             GtidFile.mariadb("binlog.000002", "[0-1-7,0-2-8]", [(330, "BEGIN GTID 0-2-9"), (450, "GTID 1-3-1"),
                                                                (600, "BEGIN GTID 0-2-10")])]
    assert str(files[1].start) == "0-2-8" and files[1].start_gtids == ((0, 1, 7), (0, 2, 8))
    at = MariaDbGtidPos.parse
    assert start_after(at("0-1-5"), files) == ("binlog.000001", 1171)
    assert start_after(at("0-1-7"), files) == ("binlog.000001", 1700), "the new primary's first transaction"
    assert start_after(at("0-2-8"), files) == ("binlog.000002", 330)
    assert start_after(at("0-2-9"), files) == ("binlog.000002", 450), "a domain the position never saw"
    assert start_after(at("0-2-10,1-3-1"), files) is None, "nothing newer"
    with pytest.raises(GtidPositionLost, match="begins at GTID 0-2-8 .binlog.000002., after the position 0-1-3: "
                       "the transactions in between are no longer") as lost:
        start_after(at("0-1-3"), files[1:])
    assert lost.value.kind == "purged"
    # The old primary wrote 0-1-9 and 0-1-10 that never reached the replica, which went on at 0-2-9: the copy
    # holds changes this server never had.
    with pytest.raises(GtidPositionLost, match="has not got the transactions 0-1-10 of the position 0-1-10") as lost:
        start_after(at("0-1-10"), files)
    assert lost.value.kind == "diverged"
    with pytest.raises(GtidPositionLost, match="transactions 1-5-3 of the position 0-2-9,1-5-3"):
        start_after(at("0-2-9,1-5-3"), files)
    assert start_after(at("0-1-1"), []) is None


def test_a_mysql_gtid_set_becomes_a_file_and_offset_on_another_server():
    from airflow_cdc_provider.core.gtid import GtidFile, GtidPositionLost, mysql_event_gtid, mysql_gtid_at, start_after

    a, b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4a6b2c1d-0000-11e1-8000-000000000001"
    assert mysql_event_gtid(f"SET @@SESSION.GTID_NEXT= '{a.upper()}:6'") == (a, 6)
    assert mysql_event_gtid(f"SET @@SESSION.GTID_NEXT= '{a}:etl:3'") == (f"{a}:etl", 3)
    assert mysql_event_gtid("SET @@SESSION.GTID_NEXT= 'ANONYMOUS'") is None and mysql_event_gtid("BEGIN") is None
    # A promoted replica: the old primary's transactions a:1-7 (its file 1 began with a:1-5 of an earlier
    # file, long-wrapped as MySQL prints it), then its own b:1-2. Parallel replication wrote a:7 before a:6.
    files = [GtidFile.mysql("binlog.000001", f"{a}:1-5", [
                 (155, f"SET @@SESSION.GTID_NEXT= '{a}:7'"), (480, f"SET @@SESSION.GTID_NEXT= '{a}:6'")]),
             GtidFile.mysql("binlog.000002", f"{a}:1-7", [(155, f"SET @@SESSION.GTID_NEXT= '{b}:1'"),
                                                          (400, f"SET @@SESSION.GTID_NEXT= '{b}:2'")])]
    at = MySqlGtidSet.parse
    assert start_after(at(f"{a}:1-5"), files) == ("binlog.000001", 155)
    assert start_after(at(f"{a}:1-5:7"), files) == ("binlog.000001", 480), "a hole: the first one it lacks"
    assert start_after(at(f"{a}:1-7"), files) == ("binlog.000002", 155)
    assert start_after(at(f"{a}:1-7,\n{b}:1"), files) == ("binlog.000002", 400)
    assert start_after(at(f"{b}:1-2,{a}:1-7"), files) is None
    assert str(mysql_gtid_at(files[0], 480)) == f"{a}:1-5:7" and str(mysql_gtid_at(files[1], 401)) == f"{a}:1-7,{b}:1-2"
    with pytest.raises(GtidPositionLost, match=f"begins at GTID {a}:1-7 .binlog.000002., after the position {a}:1-6"):
        start_after(at(f"{a}:1-6"), files[1:])
    with pytest.raises(GtidPositionLost, match=f"has not got the transactions {a}:8-9 of the position") as lost:
        start_after(at(f"{a}:1-9"), files)
    remaining = at(f"{a}:1-10:12-20,{b}:1-3").without(at(f"{a}:2-3:5:15-16:20-30,{b}:1-3"))
    assert str(remaining) == f"{a}:1:4:6-10:12-14:17-19"
    assert lost.value.kind == "diverged"
