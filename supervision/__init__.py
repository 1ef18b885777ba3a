"""Supervision: the Runtime, OTP-style supervisors and stable handles."""

from supervision.handle import Handle
from supervision.policy import Backoff, RestartIntensity, plan_restart, should_restart
from supervision.runtime import Runtime
from supervision.supervisor import Supervisor, SupervisorIntensityError

__all__ = [
    "Backoff",
    "Handle",
    "RestartIntensity",
    "Runtime",
    "Supervisor",
    "SupervisorIntensityError",
    "plan_restart",
    "should_restart",
]
