"""``wrap_up``: the last LLM call of a run's budget is made without tools.

Small local models in llama.cpp's function-calling mode call a tool on every
answer (issue 20: no ``fore run`` turn against llama-cpp-python ever ended
with an answer). With ``wrap_up`` the run's last call asks for
``tool_choice: "none"``, so the model has to answer from the results it has;
without it such a run ends at ``max_turns``. The real-server side of this is
``tests/llm/test_real_server.py::test_fore_run_runs_a_tool_using_turn``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fore.actors.llm import FunctionModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.worker.hooks import Hooks, LlmRequestContext
from fore.actors.worker.worker import wrap_up_choice
from fore.messages.conversation import AssistantMessage
from fore.messages.llm import LlmRequest
from fore.supervision import Runtime

WAIT = 30.0


class ToolHungry:
    """A model that calls ``list_directory`` whenever it may, and answers only when it may not.

    It keeps the tool choice of every request it got (the runtime makes the
    model forget a session's requests when the session closes).
    """

    def __init__(self) -> None:
        self.choices: list[object] = []
        self.model = FunctionModel(self.answer)

    def answer(self, request: LlmRequest) -> object:
        self.choices.append(request.tool_choice)
        if request.tool_choice == "none":
            return "Here is what I found."
        return {"tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]}


@given(turn=st.integers(1, 200), max_turns=st.integers(1, 200))
def test_only_the_last_call_of_the_budget_goes_without_tools(turn: int, max_turns: int) -> None:
    assert wrap_up_choice(False, turn, max_turns) == "auto"
    assert wrap_up_choice(True, turn, max_turns) == ("none" if turn >= max_turns else "auto")


def test_without_wrap_up_a_tool_hungry_model_ends_at_max_turns(
    fresh_runtime: Runtime, workspace: Path
) -> None:
    hungry = ToolHungry()
    with fresh_runtime.open_session(workspace=workspace, model=hungry.model, max_turns=3) as s:
        turn = s.submit("list the files", timeout=WAIT)
    assert turn.status == "max_turns"
    assert hungry.choices == ["auto"] * 3


def test_with_wrap_up_the_last_call_answers(fresh_runtime: Runtime, workspace: Path) -> None:
    hungry = ToolHungry()
    with fresh_runtime.open_session(
        workspace=workspace, model=hungry.model, max_turns=3, wrap_up=True
    ) as s:
        turn = s.submit("list the files", timeout=WAIT)
    assert turn.status == "completed", turn.error
    assert hungry.choices == ["auto", "auto", "none"]
    kinds = [item.kind for item in turn.items]
    assert kinds == ["user", "assistant", "tool_result", "assistant", "tool_result", "assistant"]
    last = turn.items[-1]
    assert isinstance(last, AssistantMessage)
    assert last.text == "Here is what I found." and not last.tool_calls


def test_a_hook_that_sets_the_tool_choice_still_wins(
    fresh_runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()

    def keep_tools(ctx: LlmRequestContext) -> None:
        ctx.tool_choice = "auto"

    hooks.pre_llm_request(keep_tools)
    hungry = ToolHungry()
    with fresh_runtime.open_session(
        workspace=workspace, model=hungry.model, max_turns=2, wrap_up=True, hooks=hooks
    ) as s:
        turn = s.submit("list the files", timeout=WAIT)
    assert turn.status == "max_turns"
    assert hungry.choices == ["auto", "auto"]


def test_each_run_has_its_own_budget(fresh_runtime: Runtime, workspace: Path) -> None:
    """The second run of a session gets its full budget back: ``none`` only on its last call."""
    hungry = ToolHungry()
    with fresh_runtime.open_session(
        workspace=workspace, model=hungry.model, max_turns=2, wrap_up=True
    ) as s:
        first = s.submit("list the files", timeout=WAIT)
        second = s.submit("again", max_turns=3, timeout=WAIT)
    assert first.status == second.status == "completed"
    assert hungry.choices == ["auto", "none", "auto", "auto", "none"]


def test_fore_run_wrap_up_against_the_mock_server(tmp_path: Path) -> None:
    """``fore run --wrap-up`` over HTTP: the last request carries ``tool_choice: "none"``.

    Every scripted reply calls a tool; the strict mock honours ``none`` the
    way real servers do (no tool calls in that answer), so only the wrap-up
    call ends the run with an answer.
    """
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\n")
    call = {"name": "list_directory", "arguments": {"path": "."}}
    script = ScriptFile.model_validate(
        {"replies": [{"text": "Here is what I found.", "tool_calls": [call]}] * 3}
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORE_", "OPENAI_"))}
    with MockLlmServer(script) as server:
        done = subprocess.run(
            [
                sys.executable, "-m", "fore.supervision.cli", "run", "--workspace", str(ws),
                "--base-url", server.base_url, "--model", "mock", "--api-key", "k",
                "--max-turns", "3", "--wrap-up", "--json", "list the files",
            ],
            capture_output=True, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip
        bodies = [r.body for r in server.requests()]
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    finished = [e for e in events if e["kind"] == "turn_finished"]
    assert finished[0]["result"]["status"] == "completed"
    choices = [b.get("tool_choice", "auto") for b in bodies if isinstance(b, dict)]
    assert choices == ["auto", "auto", "none"]
