import json

import pytest
from pydantic import ValidationError

from airflow_cdc_provider.core.errors import InvalidWatermark
from airflow_cdc_provider.core.watermark import Watermark


def wm(file="binlog.000001", position=4, **kw):
    return Watermark(file=file, position=position, server_id=kw.pop("server_id", 1), **kw)


def test_json_round_trip():
    w = wm("binlog.000012", 1234, gtid="0-1-17")
    assert Watermark.from_text(w.to_text()) == w
    assert json.loads(w.to_text()) == {"file": "binlog.000012", "gtid": "0-1-17", "position": 1234, "server_id": 1,
                                       "server_uuid": None}


def test_order_follows_file_sequence_then_position():
    assert wm("binlog.000001", 9999) < wm("binlog.000002", 4)
    assert wm("binlog.000002", 100) < wm("binlog.000002", 200)
    # String order gets this wrong once the sequence grows a digit.
    assert wm("binlog.999999", 500) < wm("binlog.1000000", 4)
    assert max(wm("binlog.000010", 4), wm("binlog.000009", 800)).file == "binlog.000010"
    assert wm("binlog.000003", 7) <= wm("binlog.000003", 7)


def test_watermarks_of_different_servers_do_not_compare():
    with pytest.raises(InvalidWatermark, match="different servers"):
        wm(server_id=1) < wm(server_id=2)
    with pytest.raises(InvalidWatermark):
        wm(server_uuid="a") < wm(server_uuid="b")


def test_watermarks_of_two_servers_order_by_their_gtids():
    # Before and after a failover to a replica: other files, other positions, one GTID history.
    old = wm("binlog.000007", 900, server_id=1, gtid="0-1-12")
    new = wm("binlog.000002", 355, server_id=2, gtid="0-2-15")
    same = wm("binlog.000001", 2750, server_id=2, gtid="0-1-12")
    assert old < new and new > old and old <= same <= old and not old < same
    assert max(old, new) is new
    # Two domains that each went further on one side: neither contains the other.
    with pytest.raises(InvalidWatermark, match="without GTID positions that contain one another.*take a fresh"):
        wm(server_id=1, gtid="0-1-5,1-1-9") < wm(server_id=2, gtid="0-2-6,1-1-8")
    a, b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4a6b2c1d-0000-11e1-8000-000000000001"
    assert wm(server_uuid=a, gtid=f"{a}:1-5") < wm(server_uuid=b, gtid=f"{a}:1-5,{b}:1")
    with pytest.raises(InvalidWatermark, match="different servers"):
        wm(server_id=1, gtid="0-1-5") < wm(server_id=2)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"file":"binlog.000001","position":4}',
        '{"file":"binlog.000001","position":"4","server_id":1}',
        '{"file":"binlog","position":4,"server_id":1}',
        '{"file":"binlog.000001","position":2,"server_id":1}',
        '{"file":"binlog.000001","position":4,"server_id":1,"extra":1}',
        '{"file":"binlog.000001","position":true,"server_id":1}',
    ],
)
def test_bad_stored_watermarks_are_refused_with_the_value(text):
    with pytest.raises(InvalidWatermark):
        Watermark.from_text(text)


def test_immutable():
    with pytest.raises(ValidationError, match="frozen"):
        wm().position = 5
