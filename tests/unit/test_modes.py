"""Modes, captures, actions and statuses are enums whose members are their strings: the ledgers, version files and
XComs written before read as they did, and are written again the same."""

from __future__ import annotations

import json

import pytest

from airflow_cdc_provider.core.contract import MergeInput, TableOutcome, TableVerification
from airflow_cdc_provider.core.ledger import Committed, RunPlan, VersionInfo
from airflow_cdc_provider.core.merge import TableMerge
from airflow_cdc_provider.core.modes import Mode, Status, VerifyStatus

# As written before the enums, word for word (the run reference and watermark as every ledger holds them).
RUN = {"dag_id": "cdc", "run_id": "manual__2026-05-01"}
WATERMARK = {"file": "binlog.000003", "position": 120, "server_id": 1, "gtid": None, "server_uuid": None}
WRITTEN_BEFORE = {
    Committed: {"version": 3, "location": "file:/wh/ods.db/t/v000003", "watermark": WATERMARK,
                "as_of": "2026-05-01T00:00:00Z", "run": RUN, "mode": "heal", "columns": [["id", "int(11)"]]},
    RunPlan: {"run": RUN, "mode": "nothing", "reason": "already committed by this run: version 3"},
    VersionInfo: {"version": 3, "watermark": None, "run": RUN, "mode": "diff"},
    TableOutcome: {"source": "shop.t", "hive_table": "ods.t", "mode": "incremental", "status": "idle"},
    TableMerge: {"status": "unchanged", "reason": "the table is already past this run"},
    TableVerification: {"source": "shop.t", "hive_table": "ods.t", "status": "not_verified", "reason": "no version"},
}


@pytest.mark.parametrize("model", list(WRITTEN_BEFORE), ids=lambda m: m.__name__)
def test_a_file_written_before_reads_as_members_and_is_written_again_the_same(model):
    before = WRITTEN_BEFORE[model]
    read = model.model_validate_json(json.dumps(before))
    for field in ("mode", "status"):
        if field in before:
            value = getattr(read, field)
            assert type(value) in (Mode, Status, VerifyStatus) and value == before[field], (field, value)
    again = json.loads(read.model_dump_json())
    assert {k: again[k] for k in before} == before


def test_a_status_and_a_mode_of_one_word_are_still_two_things():
    # "nothing" the plan's mode and "nothing" the outcome's status: equal as text, told apart by type.
    assert Mode.NOTHING == Status.NOTHING == "nothing" and type(Mode.NOTHING) is not type(Status.NOTHING)


def test_a_merge_input_cannot_be_of_the_mode_nothing_nor_a_merge_result_idle():
    with pytest.raises(ValueError, match="snapshot"):
        MergeInput.model_validate({"source": "shop.t", "mode": "nothing", "upsert_files": [], "columns": [],
                                   "key": ["id"], "end": None, "as_of": "2026-05-01T00:00:00Z", "source_columns": []})
    with pytest.raises(ValueError, match="committed"):
        TableMerge.model_validate({"status": "idle"})


def test_no_mode_capture_action_or_status_is_compared_as_a_string_in_the_provider():
    """The rule, checked over the provider's source: a run's mode, a capture kind, a merge's action and a status are
    compared as members (``Mode.SNAPSHOT``), never as their strings (``== "snapshot"``), so that a renamed or new
    member is found by the type checker, not missed by a typo."""
    import re
    from pathlib import Path

    from airflow_cdc_provider.core.modes import Action, Capture

    words = sorted({m.value for enum in (Mode, Capture, Action, Status, VerifyStatus) for m in enum})
    word = "|".join(words)
    compared = re.compile(rf"""(==|!=)\s*["']({word})["']|["']({word})["']\s*(==|!=)|"""
                          rf"""\bin\s*[(\[{{]\s*["']({word})["']""")
    package = Path(__file__).resolve().parents[2] / "airflow_cdc_provider"
    found = [f"{path.relative_to(package)}:{n}: {line.strip()}" for path in sorted(package.rglob("*.py"))
             if path.name != "modes.py" for n, line in enumerate(path.read_text().splitlines(), start=1)
             if compared.search(line)]
    assert not found, "compare with the enum's member instead:\n" + "\n".join(found)
    # The rule finds what it is meant to.
    assert compared.search('if outcome.status == "committed":') and compared.search('mode in ("snapshot", "diff")')
