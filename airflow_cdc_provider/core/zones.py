"""Which names a job accepts as the readers' time zone."""

from __future__ import annotations

import re

# A zone name as the configuration admits them (``core.config.time_zone``): the verify job pastes it into an
# expression.
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*")


def zone_problem(zone: str) -> str | None:
    """Why ``zone`` cannot be a readers' zone in a job, or None."""
    if isinstance(zone, str) and _ZONE_NAME.fullmatch(zone):
        return None
    return f"The time zone {zone!r} is not a zone name such as UTC or Asia/Shanghai."
