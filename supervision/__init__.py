"""Supervision: the Runtime, OTP-style supervisors and stable handles.

The names are loaded on first use (PEP 562), so ``fore --help`` and a usage
error answer at once instead of first importing the whole runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fore.supervision.handle import Handle
    from fore.supervision.policy import Backoff, RestartIntensity, plan_restart, should_restart
    from fore.supervision.runtime import Runtime
    from fore.supervision.session import Session
    from fore.supervision.session_supervisor import SessionSupervisor
    from fore.supervision.supervisor import ChildRejectedError, Supervisor, SupervisorIntensityError

_WHERE = {
    "Backoff": "fore.supervision.policy",
    "ChildRejectedError": "fore.supervision.supervisor",
    "Handle": "fore.supervision.handle",
    "RestartIntensity": "fore.supervision.policy",
    "Runtime": "fore.supervision.runtime",
    "Session": "fore.supervision.session",
    "SessionSupervisor": "fore.supervision.session_supervisor",
    "Supervisor": "fore.supervision.supervisor",
    "SupervisorIntensityError": "fore.supervision.supervisor",
    "plan_restart": "fore.supervision.policy",
    "should_restart": "fore.supervision.policy",
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
