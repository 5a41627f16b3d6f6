"""The work directory on a disk is the tasks' user's alone: real directories, files, owners and links, no server.

Another user who could write there would choose what the Spark job switches and deletes, plant raw rows, or block
a table with a lock of their own. The tests run as root, so ``os.chown`` makes a directory or a file another
user's; each test runs under umask 0, so the modes checked are the provider's own, not the umask's.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import stat
from pathlib import Path

import pytest

from airflow_cdc_provider.core.ledger import Ledger, RunRef
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.workdir import TableDir, UnsafeWorkDir
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.stages.raw_files import RawFileWriter
from airflow_cdc_provider.stages.replay import replay
from airflow_cdc_provider.storage import make_dirs, new_file

NOBODY = 65534
RUN = RunRef("cdc", "manual__2026-03-01T10:00:00+00:00")
NOW = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC)
HEADER = RawHeader("shop.users", (("id", "int(11)"), ("name", "varchar(20)")), ("id",))


@pytest.fixture(autouse=True)
def no_umask():
    before = os.umask(0)
    yield
    os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def ledger(work: Path) -> Ledger:
    return Ledger(TableDir(work_dir=str(work), hive_table="ods.t"), work_store(str(work)))


def test_a_work_directory_made_by_the_provider_and_its_files_are_the_users_alone(tmp_path):
    work = tmp_path / "cdc" / "work"
    table = ledger(work)
    table.acquire(RUN, lambda run: False, NOW)
    store, run_dir = table.store, table.table.run(RUN.key)
    with store.staging(run_dir.raw) as local:
        writer = RawFileWriter(local / "shop.users", "shop.users", HEADER)
        writer.write("I", "a" * 32, (1, 4, 0), [1, "ann"])
        (raw,) = writer.close()
    out = Path(run_dir.root)
    replay([raw], out / "upsert.parquet", out / "delete.parquet")
    directories = [tmp_path / "cdc", *(p for p in (tmp_path / "cdc").rglob("*") if p.is_dir())]
    files = [p for p in (tmp_path / "cdc").rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"lock.json", Path(raw).name, "upsert.parquet", "delete.parquet"}
    assert {str(p): mode(p) for p in directories} == {str(p): 0o700 for p in directories}
    assert {str(p): mode(p) for p in files} == {str(p): 0o600 for p in files}


@pytest.mark.parametrize(("chmod", "says"), [(0o770, r"can be written by its group \(mode 0770\)"),
                                             (0o1777, r"can be written by its group and every user \(mode 1777\)")])
def test_a_work_directory_others_can_write_is_refused_naming_it_and_the_chmod(tmp_path, chmod, says):
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(chmod)
    with pytest.raises(UnsafeWorkDir, match=f"The directory {re.escape(str(work))} {says}.*`chmod 700 {re.escape(str(work))}`"):
        work_store(str(work))
    with pytest.raises(UnsafeWorkDir, match="can be written by its group"):
        work_store(work.as_uri())


def test_a_work_directory_of_another_user_is_refused_naming_the_owner_and_the_chown(tmp_path):
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    os.chown(work, NOBODY, NOBODY)
    where = re.escape(str(work))
    with pytest.raises(UnsafeWorkDir, match=rf"{where} belongs to the user id {NOBODY}, not to this process's "
                                            rf"\({os.geteuid()}\).*`chown -R {os.geteuid()} {where}`"):
        work_store(str(work))


def test_a_table_directory_inside_that_others_can_write_or_own_is_refused_when_it_is_written(tmp_path):
    work = tmp_path / "work"
    table = ledger(work)
    (work / "ods.t").mkdir(mode=0o777)
    with pytest.raises(UnsafeWorkDir, match=f"The directory {re.escape(str(work / 'ods.t'))} can be written"):
        table.acquire(RUN, lambda run: False, NOW)
    (work / "ods.t").chmod(0o700)
    os.chown(work / "ods.t", NOBODY, NOBODY)
    with pytest.raises(UnsafeWorkDir, match=f"{re.escape(str(work / 'ods.t'))} belongs to the user id {NOBODY}"):
        table.acquire(RUN, lambda run: False, NOW)


def test_a_lock_planted_by_another_user_is_refused_not_obeyed(tmp_path):
    work = tmp_path / "work"
    planted = ledger(work)
    planted.acquire(RunRef("cdc", "manual__2026-02-01T00:00:00+00:00"), lambda run: True, NOW)
    lock = Path(planted.table.lock)
    os.chown(lock, NOBODY, NOBODY)
    table = ledger(work)
    with pytest.raises(UnsafeWorkDir, match=f"The file {re.escape(str(lock))} belongs to the user id {NOBODY}"):
        table.acquire(RUN, lambda run: False, NOW)
    with pytest.raises(UnsafeWorkDir, match="belongs to the user id"):
        table.holder()
    os.chown(lock, os.geteuid(), os.getegid())
    lock.chmod(0o666)
    with pytest.raises(UnsafeWorkDir, match=r"can be written by its group and every user \(mode 0666\)"):
        table.holder()


def test_a_link_planted_at_a_files_name_is_never_written_through(tmp_path):
    work = tmp_path / "work"
    table = ledger(work)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    ledger_dir = Path(table.table.ledger)
    make_dirs(ledger_dir)  # 0700 each (Path.mkdir gives the parents it makes 0777 under umask 0)
    lock = ledger_dir / "lock.json"
    lock.symlink_to(victim)
    for reads_the_lock in (table.holder, lambda: table.acquire(RUN, lambda run: False, NOW)):
        with pytest.raises(UnsafeWorkDir, match=f"{re.escape(str(lock))} is a symbolic link"):
            reads_the_lock()
    assert victim.read_text() == "mine"
    # A whole-file write replaces the link by the file, leaving what it pointed at alone.
    committed = Path(table.table.committed)
    committed.symlink_to(victim)
    table.store.write_text(table.table.committed, "{}")
    assert not committed.is_symlink() and committed.read_text() == "{}" and victim.read_text() == "mine"
    # A raw file's .tmp left at its predictable name: removed, never followed.
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir(mode=0o700)
    (raw_dir / "t-00001.raw.tmp").symlink_to(victim)
    RawFileWriter(raw_dir, "t", HEADER).close()
    assert victim.read_text() == "mine" and mode(raw_dir / "t-00001.raw") == 0o600
    # Without replace, a name taken by anything fails the creation.
    (raw_dir / "planted").symlink_to(victim)
    with pytest.raises(FileExistsError):
        new_file(raw_dir / "planted")
    assert victim.read_text() == "mine"
