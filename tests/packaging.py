"""Building the provider's wheel as a user's build would: from a copy of the checkout (setuptools builds in the
source tree), without build isolation: offline, in a few seconds, with the setuptools the `test` extra installs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from airflow_cdc_provider import __version__

ROOT = Path(__file__).resolve().parents[1]
# .mysql-root: the MySQL root the tests run MySQL from (scripts/ensure-mysql.sh), whose dev/ holds device nodes.
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv*", ".demo", ".mysql-root*", "build", "dist", "*.egg-info",
                                     "__pycache__", ".pytest_cache", "metastore_db", "spark-warehouse", "derby.log")


def build_wheel(tmp: Path) -> Path:
    """The wheel built from this checkout into ``tmp``/out."""
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--quiet", "--wheel-dir", str(tmp / "out"), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, (
        "Building the wheel failed (it needs setuptools>=70.1 in this environment: `make venv` installs it with "
        f"the test extra):\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
    (path,) = (tmp / "out").glob("*.whl")
    assert path.name == f"airflow_cdc_provider-{__version__}-py3-none-any.whl"
    return path
