"""The capture user's credentials stay in the source hook: a rule over the provider's source.

The hooks open every connection; the stages, operators and the core get cursors, the binlog stream or the hook,
never the password, nor a way to connect with it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_cdc_provider

PACKAGE = Path(airflow_cdc_provider.__file__).parent
HOOKS = PACKAGE / "hooks"

# What holds the credentials, or connects with them: names, attributes, arguments and keys.
SECRET_WORDS = ("password", "passwd")
CONNECTING = {"connection_settings", "get_conn", "BinLogStreamReader"}


def _uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
            if node.attr == "connect" and isinstance(node.value, ast.Name) and node.value.id == "pymysql":
                found.append((node.lineno, "pymysql.connect"))
            if node.attr == "Connection" and ast.unparse(node.value) in ("pymysql", "pymysql.connections"):
                found.append((node.lineno, "pymysql.Connection"))  # connecting by the class (or a subclass)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.asname or node.name.rpartition(".")[2]]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # A key such as settings["password"]; prose that mentions the word is not a use.
            if node.value.strip().lower() in SECRET_WORDS:
                found.append((node.lineno, repr(node.value)))
        for name in names:
            if name in CONNECTING or any(word in name.lower() for word in SECRET_WORDS):
                found.append((getattr(node, "lineno", 0), name))
    return found


def test_only_the_hooks_hold_credentials_or_open_connections():
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if HOOKS in path.parents:
            continue
        for line, what in _uses(ast.parse(path.read_text(), str(path))):
            outside.append(f"{path.relative_to(PACKAGE)}:{line}: {what}")
    assert not outside, ("Credentials or a connection opened outside hooks/ (the hook opens every connection and "
                         "hands on cursors or the binlog stream):\n" + "\n".join(outside))


def test_the_rule_sees_the_hooks_own_uses():
    # The words the rule looks for are the ones the hook really uses: otherwise it would pass whatever happened.
    seen = {what for path in HOOKS.glob("*.py") for _, what in _uses(ast.parse(path.read_text()))}
    assert {"password", "pymysql.Connection", "BinLogStreamReader", "get_conn"} <= seen, seen
    sample = ast.parse('def f(s):\n    stage(s["password"], passwd=1)\n    return pymysql.connect(**s)\n'
                       'class C(pymysql.connections.Connection): ...\n')
    assert {w for _, w in _uses(sample)} == {"'password'", "passwd", "pymysql.connect", "pymysql.Connection"}
