"""Failpoints: named places where the process kills itself with SIGKILL, as a crash or an OOM kill would.

Tests set ``CDC_FAILPOINT=<name>`` in the environment of a run (its tasks, and the Spark driver they start) to
show that a run killed at that place loses nothing: its re-run completes and the Hive table equals the source.
It is read once, when the process starts: a failpoint in a per-event loop costs one comparison. The places:

``plan.locked``            the plan task, with every table's lock taken, before any plan is recorded
``snapshot.chunk``         the snapshot, with a chunk file half written
``extract.file``           the extraction, with a raw file half written
``extract.decode``         a decoder process of the extraction, with its first batch of row events received
``replay.write``           the replay, with the upsert file written and the delete file not
``diff.compared``          a diff-mode read, with its changes found and the changed rows not read
``merge.driver.written``   the Spark driver, with the new version's files written and not marked complete
``merge.changes.written`` the Spark driver, with a version's changelog directory written, before its commit
``merge.history.written``  the Spark driver, with a version's history directories written, before its commit
``merge.driver.switched``  the Spark driver, with the table switched to the new version, before ADD COLUMNS
``merge.driver.redefined`` the Spark driver, with a table defined again under its staged name and the table
                           dropped, before the rename that replaces it
``partition_commit.added`` a partition commit, with the new partitions added over empty directories, before the
                           one call that switches every changed partition
``merge.task.committed``   the merge task, with the job's commit in the metastore and not in the ledger
``verify.driver``          the Spark half of verify, before it sums anything
``heal.digests``           the Spark driver of a heal's digests job, before it writes any
``table.finish``           the table task, before it releases the lock
"""

from __future__ import annotations

import os
import signal

ENVIRONMENT_VARIABLE = "CDC_FAILPOINT"
_ARMED = os.environ.get(ENVIRONMENT_VARIABLE)


def failpoint(name: str) -> None:
    """Kill this process here if ``CDC_FAILPOINT`` names this place."""
    if _ARMED == name:
        print(f"failpoint {name}: killing process {os.getpid()}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
