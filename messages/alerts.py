"""User-facing alerts: warnings and errors the user must see."""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

from pydantic import Field

from fore.messages.base import Message


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


class SubscribeAlerts(Message):
    """Deliver alerts to ``address`` (all of them, or one session's)."""

    address: Any = Field(exclude=True)
    session: str | None = None


class UnsubscribeAlerts(Message):
    address: Any = Field(exclude=True)


class GetAlerts(Message):
    """Ask for the kept alerts of one session (or the runtime-wide ones for ``None``)."""

    session: str | None = None


class ForgetSession(Message):
    """The session closed: drop its kept alerts."""

    session: str
