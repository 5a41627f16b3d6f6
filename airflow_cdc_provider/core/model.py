"""The one base of every value that crosses a process or a file: a frozen pydantic model, serialised one way.

XCom values (``core.contract``), the documents of a table's work state (``core.workdir``), the ledger's files
and the Spark jobs' specs and results are all ``Model``s: ``to_text`` writes them, ``from_text`` reads them (a
``WorkStore`` does both by location).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict

M = TypeVar("M", bound="Model")


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, *args: Any, **fields: Any) -> None:
        # Positional arguments in the fields' order too, as the values' constructors always took them.
        if args:
            names = list(type(self).model_fields)
            if len(args) > len(names):
                raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional arguments")
            fields.update(zip(names, args))
        super().__init__(**fields)

    def to_xcom(self) -> dict[str, Any]:
        """Plain JSON, as XCom stores it and the UI shows it."""
        return self.model_dump(mode="json")

    def to_text(self) -> str:
        """The document as a file holds it."""
        return self.model_dump_json(indent=1)

    @classmethod
    def from_text(cls: type[M], text: str) -> M:
        return cls.model_validate_json(text)


def _utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC)


# A moment: a time with its zone (a naive time is refused), held in UTC.
Instant = Annotated[AwareDatetime, AfterValidator(_utc)]
