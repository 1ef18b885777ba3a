"""User-facing alerts: warnings and errors the user must see."""

from __future__ import annotations

import time
from enum import StrEnum

from pydantic import Field

from messages.base import Message


class AlertLevel(StrEnum):
    """How loud an alert is."""

    INFO = "info"
    WARN = "warn"
    ERROR = "error"


class Alert(Message):
    """A user-facing warning or error.

    ``source`` names the part of the runtime that raised it (``file_ref``,
    ``blob_store``, ``speculator``, ``supervisor`` ...); ``session`` is the
    session it concerns, or ``None`` for runtime-wide alerts.
    """

    level: AlertLevel
    text: str
    session: str | None = None
    source: str
    at: float = Field(default_factory=time.time)
