"""The one base of every value that crosses a process or a file: a frozen pydantic model, serialised one way.

XCom values (``core.contract``), the documents of a table's work state (``core.workdir``) and the Spark jobs'
specs and results are all ``Model``s: ``model_dump_json`` writes them, ``model_validate_json`` reads them.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

M = TypeVar("M", bound="Model")


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_xcom(self) -> dict[str, Any]:
        """Plain JSON, as XCom stores it and the UI shows it."""
        return self.model_dump(mode="json")

    def to_text(self) -> str:
        """The document as a file holds it."""
        return self.model_dump_json(indent=1)

    @classmethod
    def from_text(cls: type[M], text: str) -> M:
        return cls.model_validate_json(text)
