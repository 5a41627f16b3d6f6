"""The log a stage writes to: its task's (an operator's ``self.log``), or any ``logging.Logger`` in a test."""

from __future__ import annotations

from typing import Any, Protocol


class TaskLog(Protocol):
    def info(self, event: Any, /, *args: Any) -> Any: ...

    def warning(self, event: Any, /, *args: Any) -> Any: ...

    def error(self, event: Any, /, *args: Any) -> Any: ...

    def exception(self, event: Any, /, *args: Any) -> Any: ...
