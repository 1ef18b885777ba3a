"""Supervision: the Runtime, OTP-style supervisors and stable handles.

The names are loaded on first use (PEP 562), so ``fore --help`` and a usage
error answer at once instead of first importing the whole runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from supervision.handle import Handle
    from supervision.policy import Backoff, RestartIntensity, plan_restart, should_restart
    from supervision.runtime import Runtime
    from supervision.session import Session
    from supervision.session_supervisor import SessionSupervisor
    from supervision.supervisor import ChildRejectedError, Supervisor, SupervisorIntensityError

_WHERE = {
    "Backoff": "supervision.policy",
    "ChildRejectedError": "supervision.supervisor",
    "Handle": "supervision.handle",
    "RestartIntensity": "supervision.policy",
    "Runtime": "supervision.runtime",
    "Session": "supervision.session",
    "SessionSupervisor": "supervision.session_supervisor",
    "Supervisor": "supervision.supervisor",
    "SupervisorIntensityError": "supervision.supervisor",
    "plan_restart": "supervision.policy",
    "should_restart": "supervision.policy",
}

__all__ = [
    "Backoff",
    "ChildRejectedError",
    "Handle",
    "RestartIntensity",
    "Runtime",
    "Session",
    "SessionSupervisor",
    "Supervisor",
    "SupervisorIntensityError",
    "plan_restart",
    "should_restart",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'supervision' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
