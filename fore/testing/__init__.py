"""Testing Fore applications (and Fore itself) without a real model.

* :class:`ScriptedModel` answers from a script (a list of replies, or a JSON
  file: see the README's "scripted model" section); :class:`FunctionModel`
  answers each request with a function of it.
* :class:`MockLlmServer` serves the OpenAI-compatible Chat Completions API on
  127.0.0.1 with a latency model and fault injection, in this process
  (``SpawnedMockLlmServer``: in a child process; ``fore mock-llm`` from a shell).
* :class:`RecordingHook` / :class:`ScriptedHook` stand in for hooks.
* :func:`capture_logs` collects Fore's log events; :func:`wait_until` polls a
  condition with a deadline (tests must not assert on timing).
* A pytest plugin with fixtures (a runtime, a workspace, a scripted session):
  add ``pytest_plugins = ["fore.testing.pytest_plugin"]`` to a ``conftest.py``.
  It is opt-in, so installing Fore never adds fixtures to a host's test runs.
"""

from __future__ import annotations

from fore.actors.core.logs import capture_logs
from fore.actors.llm.mock_server import (
    FaultSpec,
    MockLlmServer,
    MockSettings,
    MockStats,
    RecordedRequest,
    SpawnedMockLlmServer,
)
from fore.actors.llm.offline import FunctionModel, ScriptedModel
from fore.actors.worker.testing import RecordingHook, ScriptedHook
from fore.testing._wait import wait_until

__all__ = [
    "FaultSpec",
    "FunctionModel",
    "MockLlmServer",
    "MockSettings",
    "MockStats",
    "RecordedRequest",
    "RecordingHook",
    "ScriptedHook",
    "ScriptedModel",
    "SpawnedMockLlmServer",
    "capture_logs",
    "wait_until",
]
