"""Throwaway MariaDB and MySQL servers for the tests, each started from a copy of one data directory made once per
session and product.

``mariadb-install-db`` (or ``mysqld --initialize-insecure``) takes seconds, most of it writing the same system
tables each time; copying what it wrote once takes a fraction of that. The server itself starts as
``ThrowawayServer.start`` starts it (it installs nothing into a data directory that already holds the system tables).
"""

from __future__ import annotations

import atexit
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_cdc_testing.server import Product, ThrowawayServer

_templates: dict[Product, Path] = {}


def _template_data_dir(product: Product) -> Path:
    """A data directory as a fresh install leaves it, made on first use and removed when the session ends."""
    if product not in _templates:
        root = ThrowawayServer.home(None, product)
        atexit.register(shutil.rmtree, root, True)
        ThrowawayServer(root, 0, {}, product=product)._install()  # the same install a server of its own would run
        _templates[product] = root / "data"
    return _templates[product]


def start_server(base_dir: str | Path, overrides: Mapping[str, Any] | None = None,
                 environment: Mapping[str, str] | None = None, tls: bool = False,
                 product: Product = Product.MARIADB) -> ThrowawayServer:
    """``ThrowawayServer.start`` in ``base_dir`` (for MySQL: a directory in its root that ``base_dir`` links to), its
    data directory a copy of the session's template; ``tls``: with TLS required (``ThrowawayServer.start``)."""
    base = ThrowawayServer.home(base_dir, product)
    if not (base / "data").exists():
        # Not MySQL's auto.cnf: each server makes its own server_uuid at its first start, which names its GTIDs.
        shutil.copytree(_template_data_dir(product), base / "data", symlinks=True,
                        ignore=shutil.ignore_patterns("auto.cnf"))
    return ThrowawayServer.start(base, overrides, environment=environment, tls=tls, product=product)
