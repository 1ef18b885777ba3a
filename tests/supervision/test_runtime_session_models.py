"""A session's per-model state dies with the session.

A model object can serve many sessions (a :class:`ScriptedModel` keeps one
script cursor per session id); when a session closes -- by itself or with the
runtime -- the runtime tells its model and fast model to ``forget`` it, so a
long-running process does not accumulate state for sessions long gone, and a
new session that reuses an id starts afresh.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fore.actors.llm import ScriptedModel
from fore.messages.conversation import AssistantMessage
from fore.supervision import Runtime

pytestmark = pytest.mark.runtime(blobs=False)

WAIT = 30.0


class ForgetfulScript(ScriptedModel):
    """A scripted model that also records which sessions it was told to forget."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__([{"text": r} for r in replies])
        self.forgotten: list[str] = []

    def forget(self, session_id: str) -> None:
        self.forgotten.append(session_id)
        super().forget(session_id)


def answer(rt: Runtime, workspace: Path, model: ScriptedModel, session_id: str) -> str:
    session = rt.open_session(workspace=workspace, model=model, session_id=session_id)
    try:
        turn = session.submit("hello", timeout=WAIT)
        assert turn.status == "completed"
        last = turn.items[-1]
        assert isinstance(last, AssistantMessage)
        return last.text
    finally:
        session.close()


def test_closing_a_session_makes_its_models_forget_it(
    fresh_runtime: Runtime, tmp_path: Path
) -> None:
    model = ForgetfulScript(["first", "second"])
    fast = ForgetfulScript(["suggestion"])
    session = fresh_runtime.open_session(
        workspace=tmp_path, model=model, fast_model=fast, session_id="s1"
    )
    assert session.submit("hello", timeout=WAIT).status == "completed"
    session.close()
    assert model.forgotten == ["s1"]
    assert fast.forgotten == ["s1"]


def test_a_reused_session_id_starts_the_script_afresh(
    fresh_runtime: Runtime, tmp_path: Path
) -> None:
    model = ScriptedModel([{"text": "first"}, {"text": "second"}])
    assert answer(fresh_runtime, tmp_path, model, "again") == "first"
    assert answer(fresh_runtime, tmp_path, model, "again") == "first"


def test_closing_the_runtime_makes_the_models_of_open_sessions_forget_them(
    tmp_path: Path,
) -> None:
    model = ForgetfulScript(["first"])
    rt = Runtime(name="session-models-close", blobs=False)
    try:
        rt.open_session(workspace=tmp_path, model=model, session_id="open")
    finally:
        assert rt.close(timeout=30)
    assert model.forgotten == ["open"]
