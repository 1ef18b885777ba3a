"""The forcing budget of pending actions: never a loop, never an action left un-forced.

Regression tests for audit G3 / G10 (issue 8, "no endless forcing"):

* failed applies spend the same budget as ignored forced turns: at most
  MAX_FORCED_ATTEMPTS (4) forced turns per action, then forcing stops, the
  action stays pending with its reminder, and one Warn alert is raised;
* a stale preview is not forced again at all (no retry can succeed); the
  model still sees the error and the reminder and can discard;
* a forced directive spent on a different (newer) action is given back, so
  the older action is forced again -- each action has its own budget.

Sessions are real; the models are FunctionModels that answer ``apply``
whenever they are forced, the worst case for a loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fore.actors.llm import FunctionModel
from fore.actors.resolve import MAX_FORCED_ATTEMPTS, PendingActions
from fore.messages.conversation import ToolResult
from fore.messages.llm import LlmRequest, NamedToolChoice
from fore.supervision import Runtime
from tests.resolve.test_resolve import call, results

WAIT = 20.0
FORCED = NamedToolChoice(name="resolve")


def forced(requests: list[LlmRequest]) -> list[bool]:
    return [r.tool_choice == FORCED for r in requests]


def reminder(request: LlmRequest) -> str:
    texts = [getattr(m, "text", "") for m in request.messages]
    return next((t for t in texts if "staged preview is waiting" in t), "")


def resolve_warnings(session: Any) -> list[str]:
    return [a.text for a in session.alerts if a.source == "resolve" and a.level == "warn"]


# -- a stale preview -------------------------------------------------------------------


def test_a_stale_preview_is_not_forced_again_and_can_be_discarded(
    runtime: Runtime, tmp_path: Path
) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 1\n")
    edits = [
        {"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"},
        {"path": "b.py", "old_string": "y = 1", "new_string": "y = 2"},
    ]
    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        user = [getattr(m, "text", "") for m in request.messages if m.kind == "user"]
        if request.tool_choice == FORCED:
            # The user edits a file right after the preview: every apply is stale.
            (tmp_path / "b.py").write_text("y = 1  # edited by the user\n")
            return {"tool_calls": [call("resolve", action="apply", reason="go")]}
        if user[-1] == "discard it" and "resolve" in {t.name for t in request.tools}:
            return {"tool_calls": [call("resolve", action="discard", reason="stale")]}
        if not any(isinstance(m, ToolResult) for m in request.messages):
            return {"tool_calls": [call("multi_edit", edits=edits, preview=True)]}
        return {"text": "done"}

    with runtime.open_session(workspace=tmp_path, model=FunctionModel(decide), max_turns=20) as s:
        turn = s.submit("rename", timeout=WAIT)
        # Before the fix: forced on every request until max_turns (19 failed applies).
        assert turn.status == "completed"
        assert forced(seen) == [False, True, False]
        preview, failed = results(turn.items)
        assert preview.output.startswith("Preview (")
        assert failed.is_error
        assert failed.output.startswith("Apply failed: Preview is stale: b.py changed")
        # Still pending, still offered, and the reminder carries the stale error.
        assert len(s.pending_actions) == 1
        assert "resolve" in {t.name for t in seen[2].tools}
        assert "Preview is stale" in reminder(seen[2])
        assert resolve_warnings(s) == []  # not a model refusing: no alert

        turn = s.submit("discard it", timeout=WAIT)
        (discarded,) = results(turn.items)
        assert discarded.output.startswith("Discarded: 2 replacements in 2 files.")
        assert len(s.pending_actions) == 0
        assert not any(forced(seen[3:]))
    assert (tmp_path / "a.py").read_text() == "x = 1\n"  # nothing was ever written
    assert (tmp_path / "b.py").read_text() == "y = 1  # edited by the user\n"


# -- failed applies spend the budget -----------------------------------------------------


def test_failing_applies_are_forced_at_most_four_times_then_one_alert(
    runtime: Runtime, tmp_path: Path
) -> None:
    attempts: list[str] = []

    def apply(reason: str) -> str:
        attempts.append(reason)
        raise RuntimeError("the disk is read-only")

    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        if request.tool_choice == FORCED:
            return {"tool_calls": [call("resolve", action="apply", reason=f"try {len(seen)}")]}
        return {"text": "giving up for now"}

    with runtime.open_session(workspace=tmp_path, model=FunctionModel(decide), max_turns=30) as s:
        s.pending_actions.queue_resolve_handler(
            label="rewrite", source_tool_name="custom_tool", apply=apply
        )
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed"
        assert MAX_FORCED_ATTEMPTS == 4
        assert forced(seen) == [True] * 4 + [False]
        assert len(attempts) == 4
        assert all(r.output == "Apply failed: the disk is read-only" for r in results(turn.items))
        (action,) = s.pending_actions.pending()
        assert (action.failures, action.ignored, action.forcing) == (4, 0, False)
        assert "the disk is read-only" in reminder(seen[-1])  # the reminder stays
        (warning,) = resolve_warnings(s)
        assert warning == (
            "4 attempts to resolve it failed for the preview 'rewrite'; it is no longer "
            "forced and stays pending until it is applied or discarded."
        )
        # Nothing forces it any more, across submits, and no second alert.
        s.submit("again", timeout=WAIT)
        assert len(seen) == 6 and not any(forced(seen[5:]))
        assert len(resolve_warnings(s)) == 1


def test_ignored_turns_and_failed_applies_share_one_budget(
    runtime: Runtime, tmp_path: Path
) -> None:
    def apply(reason: str) -> str:
        raise RuntimeError("busy")

    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        if request.tool_choice != FORCED:
            return {"text": "done"}
        if sum(forced(seen)) % 2:  # odd forced turns: ignore; even: a failing apply
            return {"tool_calls": [call("list_directory")]}
        return {"tool_calls": [call("resolve", action="apply", reason="go")]}

    with runtime.open_session(workspace=tmp_path, model=FunctionModel(decide)) as s:
        s.pending_actions.queue_resolve_handler(
            label="mixed", source_tool_name="custom_tool", apply=apply
        )
        s.submit("go", timeout=WAIT)
        assert forced(seen) == [True] * 4 + [False]
        (action,) = s.pending_actions.pending()
        assert (action.ignored, action.failures, action.forcing) == (2, 2, False)
        (warning,) = resolve_warnings(s)
        assert warning.startswith("2 forced turns were ignored and 2 attempts to resolve it failed")


def test_a_resolve_that_consumes_nothing_is_a_miss(runtime: Runtime, tmp_path: Path) -> None:
    # A call with invalid arguments never reaches the store: without counting
    # it, a model that always answers so would be forced forever.
    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        if request.tool_choice == FORCED:
            return {"tool_calls": [call("resolve", action="apply")]}  # no reason
        return {"text": "done"}

    with runtime.open_session(workspace=tmp_path, model=FunctionModel(decide), max_turns=30) as s:
        s.pending_actions.queue_resolve_handler(
            label="plan", source_tool_name="custom_tool", apply=lambda reason: "ok"
        )
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed"
        assert forced(seen) == [True] * 4 + [False]
        assert all(r.is_error for r in results(turn.items))
        assert len(s.pending_actions) == 1
        (warning,) = resolve_warnings(s)
        assert "ignored 4 requests" in warning


# -- each action has its own budget ---------------------------------------------------------


def test_a_directive_used_by_a_newer_action_is_given_back_to_the_older_one(
    runtime: Runtime, tmp_path: Path
) -> None:
    applied: list[str] = []
    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        if request.tool_choice != FORCED:
            return {"text": "done"}
        if sum(forced(seen)) <= MAX_FORCED_ATTEMPTS:
            return {"tool_calls": [call("list_directory")]}  # B (newest) is ignored 4 times
        return {"tool_calls": [call("resolve", action="apply", reason="ok")]}

    with runtime.open_session(workspace=tmp_path, model=FunctionModel(decide)) as s:
        store = s.pending_actions
        store.queue_resolve_handler(
            label="A", source_tool_name="t", apply=lambda r: applied.append("A") or "A done"
        )
        store.queue_resolve_handler(
            label="B", source_tool_name="t", apply=lambda r: applied.append("B") or "B done"
        )
        turn = s.submit("go", timeout=WAIT)
        # Requests 1-4 force B (ignored; B's forcing stops). Request 5 forces A,
        # but resolve takes the newest pending action -- B. Before the fix A
        # then lost its directive and was never forced again.
        assert forced(seen) == [True] * 6 + [False]
        assert applied == ["B", "A"]
        labels = [json.loads(r.output)["resolve"]["label"] for r in results(turn.items)[-2:]]
        assert labels == ["B", "A"]
        assert len(store) == 0
        assert len(resolve_warnings(s)) == 1  # B's budget only


# -- the store ----------------------------------------------------------------------------


def test_a_failed_action_goes_back_to_its_own_place_in_the_queue() -> None:
    store = PendingActions()
    store.queue_resolve_handler(label="A", source_tool_name="t", apply=lambda r: None)
    store.queue_resolve_handler(label="B", source_tool_name="t", apply=lambda r: None)
    taken = store.take()
    assert taken is not None and taken.label == "B"
    store.queue_resolve_handler(label="C", source_tool_name="t", apply=lambda r: None)
    assert store.requeue(taken) is False  # B's apply failed while C was pushed
    assert [a.label for a in store.pending()] == ["C", "B", "A"]  # newest first, stable
    directive = store.next_directive()
    assert directive is not None and directive.label == "C"


def test_budget_rules_of_the_store() -> None:
    store = PendingActions()
    store.queue_resolve_handler(label="A", source_tool_name="t", apply=lambda r: None)
    action = store.next_directive()
    assert action is not None
    assert [store.ignored(action) for _ in range(3)] == [False] * 3  # three requeues...
    assert store.ignored(action) is True  # ...the fourth miss stops forcing
    assert store.drain_exhausted() == [action] and store.drain_exhausted() == []
    assert store.ignored(action) is False and action.ignored == 4  # nothing more to count
    store.restore(action)
    assert store.next_directive() is None  # stays un-forced, still pending
    assert len(store) == 1

    stale = PendingActions()
    stale.queue_resolve_handler(label="S", source_tool_name="t", apply=lambda r: None)
    taken = stale.take()
    assert taken is not None and stale.takes == 1 and stale.taken_since(0) == [taken.id]
    assert stale.requeue(taken, retryable=False, error="Preview is stale") is False
    assert (taken.forcing, taken.failures, taken.last_error) == (False, 0, "Preview is stale")
    assert stale.next_directive() is None and len(stale) == 1
    assert stale.drain_exhausted() == []  # no alert for a stale preview
