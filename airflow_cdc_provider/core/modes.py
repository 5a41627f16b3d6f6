"""The words the plan, the merge, the ledger and the outcomes share: what a run does to a table, how a table's
changes are found, where a merge starts, and how a table's run and its verify ended.

Each is a ``StrEnum``: a member is its string, equal to it and written as it, so the JSON of every ledger, version
file and XCom is what it was, and files written before these existed read as they did.
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """What a run does to a table (``RunPlan.mode``, ``MergeInput.mode``, ``Committed.mode``)."""

    SNAPSHOT = "snapshot"  # every row read again at one moment: a first load, or asked for
    INCREMENTAL = "incremental"  # the binlog's row events since the committed version's watermark
    DIFF = "diff"  # the changes found without the binlog (``capture: diff``, ``core.diff``)
    # A binlog table whose chain broke in the run's range, brought level by a diff against its committed version;
    # the binlog goes on from the diff's moment (``stages.heal``). Planned as INCREMENTAL: the pass finds the break.
    HEAL = "heal"
    NOTHING = "nothing"  # the plan: this run has nothing to do to the table (it committed already, or is past it)


class Capture(StrEnum):
    """How a table's changes are found (``capture:``)."""

    BINLOG = "binlog"
    DIFF = "diff"


class Action(StrEnum):
    """What the merge does with the version the metastore points at (``core.ledger.choose_origin``)."""

    LOAD = "load"  # writes the table whole: no origin is read
    MERGE = "merge"  # applies the run's changes onto the origin version
    SKIP = "skip"  # the table is already past the run: nothing is written


class Status(StrEnum):
    """How a run ended for a table (``TableOutcome.status``)."""

    COMMITTED = "committed"  # a new version
    IDLE = "idle"  # no change in the range: the watermark advanced on the same version
    UNCHANGED = "unchanged"  # the merge found the table already past this run
    NOTHING = "nothing"  # the plan had nothing to do
    FAILED = "failed"  # see the outcome's error


class VerifyStatus(StrEnum):
    """What a verify found of a table's committed version (``TableVerification.status``)."""

    CLEAN = "clean"
    DIFFERENT = "different"
    NOT_VERIFIED = "not_verified"
