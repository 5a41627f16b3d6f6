"""Throwaway MariaDB servers for the tests, each started from a copy of one data directory made once per session.

``mariadb-install-db`` takes seconds, most of it writing the same system tables each time; copying what it wrote
once takes a fraction of that. The server itself starts as ``ThrowawayServer.start`` starts it (it installs
nothing into a data directory that already holds the system tables).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_cdc_testing.server import ThrowawayServer

_template: Path | None = None


def _template_data_dir() -> Path:
    """A data directory as ``mariadb-install-db`` leaves it, made on first use and removed when the session ends."""
    global _template
    if _template is None:
        root = Path(tempfile.mkdtemp(prefix="cdc-mariadb-template-"))
        atexit.register(shutil.rmtree, root, True)
        ThrowawayServer(root, 0, {})._install()  # the same install a server of its own would run
        _template = root / "data"
    return _template


def start_server(base_dir: str | Path, overrides: Mapping[str, Any] | None = None,
                 environment: Mapping[str, str] | None = None, tls: bool = False) -> ThrowawayServer:
    """``ThrowawayServer.start`` in ``base_dir``, its data directory a copy of the session's template; ``tls``:
    with TLS required (``ThrowawayServer.start``)."""
    base = Path(base_dir)
    base.mkdir(parents=True, exist_ok=True)
    if not (base / "data").exists():
        shutil.copytree(_template_data_dir(), base / "data", symlinks=True)
    return ThrowawayServer.start(base, overrides, environment=environment, tls=tls)
