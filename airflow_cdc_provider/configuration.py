"""Reading a configuration file: the YAML a DAG file names, into the typed ``CdcConfig``.

The core's ``CdcConfig.from_dict`` checks the values; this reads the file, and says what is wrong with the file
itself (missing, unreadable, not YAML) with its path, so that a DAG's import error tells the user what to fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # (no stubs installed)

from airflow_cdc_provider.core.config import DOC, CdcConfig, ConfigError


def load_config(path: str | os.PathLike[str]) -> CdcConfig:
    """The configuration in the YAML file ``path``: one source server, its work directory, Hive, Spark and tables.

    Raises ``ConfigError`` naming the file (and the line, for YAML that does not parse) and what to do.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"The configuration file {file} does not exist (as seen from {Path.cwd()}): give the path "
                          "of the YAML file, e.g. Path(__file__).with_name('cdc.yaml') beside the DAG file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"The configuration file {file} cannot be read: {exc}. Make it a UTF-8 text file that "
                          "the DAG processor's and the workers' user can read.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"The configuration file {file} is not valid YAML{where}: {problem}. Fix the file (see "
                          f"{DOC} for its keys).") from None
    if data is None:
        raise ConfigError(f"The configuration file {file} is empty: it needs at least `work: dir:`, "
                          f"`hive: warehouse_dir:` and `tables:` (see {DOC}).")
    return CdcConfig.from_dict(data, origin=str(file))
