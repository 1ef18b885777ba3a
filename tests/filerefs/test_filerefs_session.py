"""``@path`` references through a real session, and the alert sink.

The resolver's own rules are tested in test_fileref_resolver.py; here: the
wiring (prepared items -> history right after the user message), the alerts
(session.alerts and the event stream), that a cancelled submit leaves no stale
attachment, and what the model is sent across turns.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

import fore.testing
from fore.actors.core import PooledActor
from fore.actors.llm import FunctionModel, ScriptedModel
from fore.actors.worker.hooks import Cancel, Continue, Hooks, PromptContext
from fore.actors.worker.interceptor import Interceptor
from fore.messages.alerts import Alert, AlertLevel, GetAlerts
from fore.messages.conversation import FileRef, SystemMessage, TextSegment, UserMessage
from fore.messages.llm import LlmRequest
from fore.messages.session import AlertRaised
from fore.supervision import Runtime

WAIT = 20.0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("def main():\n    return 42\n")
    (tmp_path / "README.md").write_text("# Project\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("guide\n")
    return tmp_path


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


def recorder() -> tuple[FunctionModel, list[LlmRequest]]:
    seen: list[LlmRequest] = []
    return FunctionModel(lambda r: seen.append(r) or "ok"), seen


def test_a_reference_lands_right_after_the_user_message(runtime: Runtime, workspace: Path) -> None:
    model, seen = recorder()
    with runtime.open_session(workspace=workspace, model=model) as s:
        turn = s.submit("explain @src/app.py please", timeout=WAIT)
        user, attached, answer = turn.items
        assert isinstance(user, UserMessage) and user.text == "explain @src/app.py please"
        assert attached == SystemMessage(text="[File: src/app.py]\ndef main():\n    return 42\n")
        assert answer.text == "ok"
        assert [type(m).__name__ for m in seen[0].messages] == ["UserMessage", "SystemMessage"]
        assert any(isinstance(seg, FileRef) and seg.path == "src/app.py" for seg in user.segments)


def test_several_references_in_order_and_a_repeat_attached_once(
    runtime: Runtime, workspace: Path
) -> None:
    model, _ = recorder()
    with runtime.open_session(workspace=workspace, model=model) as s:
        turn = s.submit("see @README.md and @docs/ and again @README.md", timeout=WAIT)
        headers = [i.text.split("\n", 1)[0] for i in turn.items if isinstance(i, SystemMessage)]
        assert headers == ["[File: README.md]", "[Dir: docs/]"]


def test_a_path_referenced_in_two_spellings_is_attached_once(
    runtime: Runtime, workspace: Path
) -> None:
    model, seen = recorder()
    with runtime.open_session(workspace=workspace, model=model) as s:
        turn = s.submit("compare @src/app.py with @./src/app.py", timeout=WAIT)
        systems = [i for i in turn.items if isinstance(i, SystemMessage)]
        assert [i.text.split("\n", 1)[0] for i in systems] == ["[File: src/app.py]"]
        assert turn.items[0].text == "compare @src/app.py with @./src/app.py"
        assert s.alerts == ()
        assert sum(isinstance(m, SystemMessage) for m in seen[0].messages) == 1


def test_an_unresolved_reference_warns_and_leaves_a_placeholder(
    runtime: Runtime, workspace: Path
) -> None:
    model, seen = recorder()
    with runtime.open_session(workspace=workspace, model=model) as s:
        turn = s.submit("fix @src/lib.rs and @src/app.py", timeout=WAIT)
        user = turn.items[0]
        assert user.text == "fix [unresolved file ref: src/lib.rs] and @src/app.py"
        systems = [i for i in turn.items if isinstance(i, SystemMessage)]
        assert [i.text.split("\n", 1)[0] for i in systems] == ["[File: src/app.py]"]
        (alert,) = s.alerts
        assert alert.level is AlertLevel.WARN and alert.source == "file_ref"
        assert alert.text == "file ref @src/lib.rs could not be resolved: not found"
        events = s.drain_events()
        assert any(isinstance(e, AlertRaised) and e.alert == alert for e in events)
        assert seen[0].messages[0].text == user.text  # the model is told about the typo


def test_out_of_scope_reference_is_refused(
    runtime: Runtime, workspace: Path, tmp_path_factory: Any
) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret.txt"
    outside.write_text("TOP SECRET")
    (workspace / "link.txt").symlink_to(outside)
    model, seen = recorder()
    with runtime.open_session(workspace=workspace, model=model) as s:
        turn = s.submit(f"read @link.txt and @../x and @{outside}", timeout=WAIT)
        assert not any(isinstance(i, SystemMessage) for i in turn.items)
        assert "TOP SECRET" not in str(seen[0].model_dump())
        reasons = sorted(a.text for a in s.alerts)
        assert len(reasons) == 3 and all("could not be resolved" in r for r in reasons)


def test_a_cancelled_submit_leaves_no_stale_attachment(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()

    def reject_secret(ctx: PromptContext) -> Any:
        return Cancel("not now") if "secret" in ctx.text else Continue()

    hooks.on_prompt_submit(reject_secret)
    model, seen = recorder()
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        assert s.submit("secret @src/app.py", timeout=WAIT).status == "rejected"
        turn = s.submit("just a question", timeout=WAIT)
        assert [type(i).__name__ for i in turn.items] == ["UserMessage", "AssistantMessage"]
        assert not any(isinstance(i, SystemMessage) for i in s.history)
        assert len(seen) == 1 and len(seen[0].messages) == 1


class VetoSecrets(Interceptor):
    """A trusted interceptor (the session's own) that cancels every submit naming a secret."""

    def on_prompt_submit(self, message: UserMessage) -> Cancel | Continue:
        return Cancel("vetoed") if "secret" in message.text else Continue()


def test_an_interceptor_cancel_leaves_no_stale_attachment(
    runtime: Runtime, workspace: Path
) -> None:
    """Audit G12: a submit cancelled by a trusted interceptor -- before any public hook
    ran -- leaves nothing of its resolved files behind: not in history, not in the
    next submit. (The resolved items belong to their run alone; there is no per-session
    stash to drop at cancel time any more.)"""
    model, seen = recorder()
    with runtime.open_session(workspace=workspace, model=model, interceptor=VetoSecrets()) as s:
        assert s.submit("secret @src/app.py", timeout=WAIT).status == "rejected"
        assert seen == [] and not any(isinstance(i, SystemMessage) for i in s.history)
        turn = s.submit("just a question", timeout=WAIT)
        assert [type(i).__name__ for i in turn.items] == ["UserMessage", "AssistantMessage"]
        assert not any(isinstance(i, SystemMessage) for i in s.history)
        assert len(seen) == 1 and len(seen[0].messages) == 1


def test_a_cancelled_submit_leaves_nothing_of_its_files_in_the_session_state(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()
    hooks.on_prompt_submit(lambda ctx: Cancel("not now"))
    model, seen = recorder()
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("secret @src/app.py", timeout=WAIT)
        assert turn.status == "rejected" and seen == []
        # Observable before any next submit: no field of the session's state
        # holds the resolved file (its body is "def main():\n    return 42\n").
        assert "return 42" not in repr(s._state)
        assert not any(isinstance(i, SystemMessage) for i in s.history)


def test_attachments_stay_in_history_for_later_turns(runtime: Runtime, workspace: Path) -> None:
    model, seen = recorder()
    with runtime.open_session(workspace=workspace, model=model) as s:
        s.submit("look at @README.md", timeout=WAIT)
        s.submit("and now?", timeout=WAIT)
        second = [getattr(m, "text", "") for m in seen[1].messages]
        assert second == ["look at @README.md", "[File: README.md]\n# Project\n", "ok", "and now?"]


def test_explicit_segments_and_a_quoted_path(runtime: Runtime, workspace: Path) -> None:
    (workspace / "my notes.txt").write_text("remember")
    model, _ = recorder()
    with runtime.open_session(workspace=workspace, model=model) as s:
        turn = s.submit('read @"my notes.txt" then mail me at dev@example.com', timeout=WAIT)
        assert [i.text for i in turn.items if isinstance(i, SystemMessage)] == [
            "[File: my notes.txt]\nremember"
        ]
        assert s.alerts == ()  # the e-mail address is not a reference
        segments = (TextSegment(text="check "), FileRef(path="src/app.py"))
        turn = s.submit(segments=segments, timeout=WAIT)
        assert turn.items[0].text == "check @src/app.py"
        assert turn.items[1].text.startswith("[File: src/app.py]\n")


# -- the alert sink --


class Collect(PooledActor):
    def __init__(self, inbox: list[Any]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> None:
        self.inbox.append(message)


def test_the_sink_keeps_bounded_history_and_fans_out(runtime: Runtime) -> None:
    from fore.messages.alerts import SubscribeAlerts

    inbox: list[Any] = []
    with runtime.system.activated():
        collector = Collect.start(inbox)
    runtime.alert_sink.ask(SubscribeAlerts(address=collector, session="s-x"), timeout=WAIT)
    for i in range(250):
        runtime.alert_sink.tell(
            Alert(level=AlertLevel.INFO, text=f"n{i}", session="s-x", source="test")
        )
    runtime.alert_sink.tell(
        Alert(level=AlertLevel.ERROR, text="other", session="s-y", source="test")
    )
    kept = runtime.alert_sink.ask(GetAlerts(session="s-x"), timeout=WAIT)
    assert len(kept) == 200 and kept[0].text == "n50" and kept[-1].text == "n249"
    wait_until(lambda: len(inbox) == 250)  # every alert of the subscribed session...
    assert [a.text for a in inbox] == [f"n{i}" for i in range(250)]  # ...in order, and no other
    collector.stop()


class Crashing(Interceptor):
    def on_prompt_submit(self, message: UserMessage) -> Any:
        if message.text == "crash":
            raise RuntimeError("bug in trusted code")
        return Continue()


def test_a_worker_restart_is_an_alert_for_its_session(runtime: Runtime, workspace: Path) -> None:
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([{"text": "ok"}]), interceptor=Crashing()
    ) as s:
        with pytest.raises(RuntimeError, match="worker failed"):
            s.submit("crash", timeout=WAIT)
        wait_until(lambda: any(a.source == "supervisor" for a in s.alerts))
        (alert,) = [a for a in s.alerts if a.source == "supervisor"]
        assert alert.level is AlertLevel.WARN and "worker failed" in alert.text
        assert alert.session == s.id
