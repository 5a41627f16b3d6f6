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
    from airflow_cdc_provider.core.gtid import mariadb_event_gtid, mariadb_gtid_list, mariadb_start_after

    # As a promoted replica lists them (SHOW BINLOG EVENTS): the primary's GTIDs, its own files and offsets.
    assert mariadb_event_gtid("BEGIN GTID 0-1-6") == (0, 1, 6) and mariadb_event_gtid("GTID 0-1-1 cid=12") == (0, 1, 1)
    assert mariadb_event_gtid("COMMIT /* xid=20 */") is None
    assert str(mariadb_gtid_list("[1-2-3,0-1-7]")) == "0-1-7,1-2-3" and str(mariadb_gtid_list("[]")) == ""
    files = [("binlog.000001", mariadb_gtid_list("[]")), ("binlog.000002", mariadb_gtid_list("[0-1-7]"))]
    events = {"binlog.000001": [(325, "GTID 0-1-1"), (926, "BEGIN GTID 0-1-5"), (1171, "BEGIN GTID 0-1-6"),
                                (1414, "BEGIN GTID 0-1-7")],
              "binlog.000002": [(330, "BEGIN GTID 0-1-8"), (600, "BEGIN GTID 0-2-9")]}
    at = MariaDbGtidPos.parse
    assert mariadb_start_after(at("0-1-5"), files, events) == ("binlog.000001", 1171)
    assert mariadb_start_after(at("0-1-7"), files, events) == ("binlog.000002", 330)
    assert mariadb_start_after(at("0-1-8"), files, events) == ("binlog.000002", 600), "a new server id, same domain"
    assert mariadb_start_after(at("0-2-9"), files, events) is None, "nothing newer"
    with pytest.raises(InvalidWatermark, match="after the position 0-1-3: the transactions in between are no longer"):
        mariadb_start_after(at("0-1-3"), files[1:], events)
