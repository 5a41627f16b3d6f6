"""Where a table's work state lives (``core.workdir``), and the rule that nothing else names it: the package's
source is read, and a path of the work state built anywhere but there, or a hand-written codec of a persisted
value, fails this test with its file and line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from airflow_cdc_provider.core.ledger import RunRef
from airflow_cdc_provider.core.workdir import RunDir, SourceDir, TableDir

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_cdc_provider"
HOME = PACKAGE / "core" / "workdir.py"
RUN = RunRef("cdc", "scheduled__2026-03-01T10:00:00+00:00")


@pytest.mark.parametrize("work_dir", ["/data/cdc/work", "/data/cdc/work/", "s3://bucket/cdc/work"])
def test_a_table_s_files_are_named_under_its_directory(work_dir):
    table = TableDir(work_dir=work_dir, hive_table="ods.orders")
    root = work_dir.rstrip("/") + "/ods.orders"
    assert (table.root, table.lock, table.committed, table.run_plan(RUN.key)) == (
        root, f"{root}/ledger/lock.json", f"{root}/ledger/committed.json", f"{root}/ledger/runs/{RUN.key}.json")
    assert (table.verify_state, table.repair, table.verify_report(RUN.key)) == (
        f"{root}/verify/state.json", f"{root}/verify/repair.json", f"{root}/verify/{RUN.key}.json")
    run = table.run(RUN.key)
    assert (run.root, run.raw, run.snapshot, run.snapshot_progress) == (
        f"{root}/runs/{RUN.key}", f"{root}/runs/{RUN.key}/raw", f"{root}/runs/{RUN.key}/snapshot",
        f"{root}/runs/{RUN.key}/snapshot/snapshot-progress.json")
    assert (run.merge_job(2), run.merge_result(2), run.verify_jobs) == (
        f"{root}/runs/{RUN.key}/merge-job-2.json", f"{root}/runs/{RUN.key}/merge-result-2.json",
        f"{root}/runs/{RUN.key}/verify-jobs.json")
    assert RunDir.model_validate_json(run.to_text()) == run, "it goes into XCom with the table's plan"


def test_a_source_s_catalog_is_named_after_its_dag_and_task_group():
    assert SourceDir.of_task("/w", "cdc", "shop.check").catalog == "/w/_catalog/cdc.shop.json"
    assert SourceDir.of_task("s3://b/w", "cdc", "check").catalog == "s3://b/w/_catalog/cdc.tables.json"


# The rule. Names only the typed home may spell: the work state's files and its own directories.
FILE_NAMES = ("lock.json", "committed.json", "state.json", "repair.json", "snapshot-progress.json", "merge-job",
              "merge-result", "verify-jobs", "verify-result", "verify-source-sums", "upsert.parquet",
              "delete.parquet", "fills.parquet")
DIRECTORY_NAMES = ("ledger", "runs", "_catalog")
# Names that hold a location under work_dir: a path built from one (joined, formatted, divided) is the work
# state's path built outside its home.
LOCATION_NAMES = ("work_dir", "run_dir", "table_dir", "ledger_dir")
JOINS = ("join", "Path", "PurePath", "PurePosixPath")
# Hand-written codecs. The configuration's parsers read what a user wrote (YAML) and write nothing back.
CODECS = ("to_dict", "from_dict", "to_json", "from_json")
USER_INPUT_PARSERS = {("core/config.py", "from_dict")}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _mentions_location(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and n.id in LOCATION_NAMES)
               or (isinstance(n, ast.Attribute) and n.attr in LOCATION_NAMES) for n in ast.walk(node))


def _called(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def violations(source: str, name: str) -> list[str]:
    """Where ``source`` (the file ``name``, relative to the package) builds a path of the work state, climbs a
    location, or defines a codec; empty for the typed home itself."""
    tree = ast.parse(source)
    found: list[str] = []
    is_home = name == "core/workdir.py"
    is_storage = name == "storage.py"
    docstrings = _docstrings(tree)

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{name}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in CODECS:
            if (name, node.name) not in USER_INPUT_PARSERS:
                report(node, f"def {node.name}: a persisted or cross-process value is a core.model.Model")
        if is_home:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if any(file in node.value for file in FILE_NAMES) or node.value.strip("/") in DIRECTORY_NAMES:
                report(node, f"{node.value!r} names the work state: take it from core.workdir")
        if isinstance(node, ast.ImportFrom) and node.module in ("airflow_cdc_provider.storage",
                                                                "airflow_cdc_provider.core.workdir"):
            if any(alias.name == "join" for alias in node.names) and not is_storage:
                report(node, "join imported: a location under work_dir comes from core.workdir")
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):
            call = node.value
            if _called(call) in ("rsplit", "rpartition", "split") and call.args and \
                    isinstance(call.args[0], ast.Constant) and call.args[0].value == "/" and \
                    not (isinstance(node.slice, ast.UnaryOp) or
                         (isinstance(node.slice, ast.Constant) and node.slice.value == -1)):
                report(node, "a location climbed by its '/': name the directory in core.workdir")
        if isinstance(node, ast.Call) and _called(node) == "dirname":
            report(node, "a location climbed by dirname: name the directory in core.workdir")
        text_join = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            isinstance(node.func.value, ast.Constant) and "/" not in str(node.func.value.value)  # " ".join(…)
        if isinstance(node, ast.Call) and _called(node) in JOINS and not text_join and \
                any(map(_mentions_location, node.args)):
            report(node, f"{_called(node)}() of a location under work_dir: name it in core.workdir")
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Add)) and _mentions_location(node):
            report(node, "a location under work_dir extended by an operator: name it in core.workdir")
        if isinstance(node, ast.JoinedStr) and _mentions_location(node) and any(
                isinstance(v, ast.Constant) and "/" in v.value for v in node.values):
            report(node, "a location under work_dir formatted into a path: name it in core.workdir")
    return found


def test_nothing_but_the_typed_home_builds_a_path_of_a_table_s_work_state_or_writes_a_codec():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        found += violations(path.read_text(), name)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source", [
    'from airflow_cdc_provider.storage import join\nlocation = join(work_dir, table, "ledger")',
    'state = ledger_dir.rstrip("/").rsplit("/", 1)[0]',
    'parent = location.rpartition("/")[0]',
    'lock = f"{table.work_dir}/{table.hive_table}/lock.json"',
    'lock = f"{work_dir}/{name}"',
    'target = os.path.join(run_dir, "raw")',
    'target = Path(table.run_dir.root) / "raw"',
    'target = self.work_dir + "/x"',
    'target = "/".join([table.table_dir.root, "x"])',
    'state = store.read_text(base + "/verify/state.json")',
    'parent = os.path.dirname(location)',
    'class Lock:\n    def to_dict(self):\n        return {}',
    'class Lock:\n    @classmethod\n    def from_json(cls, text):\n        return cls()',
])
def test_the_rule_finds_each_way_of_building_a_path_or_a_codec(source):
    assert violations(source, "operators/example.py"), source


def test_the_rule_lets_through_what_is_not_the_work_state():
    clean = ('"""Docstrings may tell of ledger/lock.json."""\nname = location.rstrip("/").rsplit("/", 1)[-1]\n'
             'target = table.run_dir.raw\nmode = "snapshot"\nout = local / UPSERT_FILE\n')
    assert violations(clean, "operators/example.py") == []


# Who may write the work state: the decision, on a directory's or a file's mode and owner.

from airflow_cdc_provider.core.workdir import access_problem  # noqa: E402

OURS, OTHER = 1000, 65534


@pytest.mark.parametrize("mode", [0o40700, 0o40755, 0o40750, 0o40711])
def test_a_directory_of_ours_that_nobody_else_can_write_is_fine(mode):
    assert access_problem("/srv/cdc/work", mode, OURS, OURS) is None


@pytest.mark.parametrize(("mode", "who"), [(0o40770, "its group"), (0o40775, "its group"),
                                           (0o40757, "every user"), (0o40777, "its group and every user"),
                                           (0o41777, "its group and every user")])  # /tmp's own mode
def test_a_directory_others_can_write_is_refused_with_its_mode_and_the_chmod_that_fixes_it(mode, who):
    problem = access_problem("/srv/cdc/work", mode, OURS, OURS)
    assert problem is not None and f"can be written by {who} (mode {mode & 0o7777:04o})" in problem
    assert "`chmod 700 /srv/cdc/work`" in problem and "/srv/cdc/work" in problem


def test_a_directory_or_file_of_another_user_is_refused_whatever_its_mode():
    problem = access_problem("/srv/cdc/work", 0o40700, OTHER, OURS)
    assert problem is not None and "belongs to the user id 65534, not to this process's (1000)" in problem
    assert "`chown -R 1000 /srv/cdc/work`" in problem
    problem = access_problem("/srv/cdc/work/ods.t/ledger/lock.json", 0o100600, OTHER, OURS, directory=False)
    assert problem is not None and problem.startswith("The file /srv/cdc/work/ods.t/ledger/lock.json belongs to")


def test_a_file_others_can_write_is_refused_and_one_they_can_only_read_is_not():
    assert access_problem("/w/lock.json", 0o100644, OURS, OURS, directory=False) is None
    problem = access_problem("/w/lock.json", 0o100666, OURS, OURS, directory=False)
    assert problem is not None and "`chmod 600 /w/lock.json`" in problem
