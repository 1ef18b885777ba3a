"""The plain parts of persistence: the writer's queue, reload merging, stored settings (issue 25).

Pure code, no actor and no database: the write-ahead's state machine is driven
by a stand-in worker whose blocking lane the test completes by hand, under
hypothesis; the rest are functions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.llm import OpenAICompatible, ScriptedModel
from fore.actors.llm.anthropic import AnthropicModel
from fore.actors.store import InvalidRecord, TurnBatch
from fore.actors.store.codec import MAX_BATCH_ITEMS
from fore.actors.worker.persistence import (
    AlertTap,
    Persistence,
    TurnWriter,
    chunks,
    merge_reload,
)
from fore.messages.alerts import Alert, AlertLevel
from fore.messages.blobs import Text
from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.llm import Usage
from fore.messages.speculation import SpeculationConfig
from fore.supervision.resume import (
    ModelNotRebuildable,
    SessionArgs,
    model_settings,
    rebuild_model,
    session_config,
    stored_args,
    summary_lines,
)


def items(n: int, start: int = 0) -> list[Any]:
    return [UserMessage(text=f"item {i}") for i in range(start, start + n)]


# -- the writer's state machine --------------------------------------------------------------------


class FakeStore:
    """Appends kept in a list; ``fail`` makes the next append raise."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.batches: list[TurnBatch] = []
        self.fail = False

    def append(self, session_id: str, batch: TurnBatch) -> None:
        if self.fail:
            raise InvalidRecord("injected")
        self.batches.append(batch)
        self.items.extend(batch.items)


class FakeWorker:
    """What :class:`TurnWriter` uses of a worker; its blocking lane runs when the test says."""

    def __init__(self) -> None:
        self.state = SimpleNamespace(history=[])
        self.config = SimpleNamespace(services=SimpleNamespace(pending_actions=None))
        self.lane: list[tuple[Callable[[], Any], Callable[..., Any], Callable[..., Any]]] = []

    def run_blocking(
        self, fn: Callable[..., Any], *args: Any, then: Any = None, on_error: Any = None
    ) -> Any:
        self.lane.append((lambda: fn(*args), then, on_error))
        return None

    def finish_one(self) -> None:
        work, then, on_error = self.lane.pop(0)
        try:
            result = work()
        except BaseException as exc:
            on_error(exc)
            return
        then(result)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["add", "save", "finish", "finish_fail"]), max_size=60))
def test_the_writer_stores_history_in_order_exactly_once_and_answers_every_save(
    ops: list[str],
) -> None:
    store = FakeStore()
    worker = FakeWorker()
    writer = TurnWriter(worker, Persistence(store=store, session_id="s"))  # type: ignore[arg-type]
    answers: list[tuple[int, str | None]] = []
    asked = 0
    added = 0
    for op in ops:
        if op == "add":
            worker.state.history.extend(items(2, added))
            added += 2
        elif op == "save":
            owed = len(worker.state.history)
            asked += 1
            deferred = writer.save(lambda problem, owed=owed: answers.append((owed, problem)))
            if not deferred:
                answers.append((owed, None))
        elif worker.lane:
            store.fail = op == "finish_fail"
            worker.finish_one()
        assert len(worker.lane) <= 1, "two appends of one session at once"
        # The store holds a prefix of history, in order, nothing twice.
        assert store.items == worker.state.history[: len(store.items)]
    store.fail = False
    while worker.lane:
        worker.finish_one()
    assert len(answers) == asked, "a save was never answered"
    for owed, problem in answers:
        if problem is None:
            assert len(store.items) >= owed, "a save answered OK before its items were stored"
    # What failed goes with a later save: one more save stores everything.
    final: list[str | None] = []
    if writer.save(final.append):
        while worker.lane:
            worker.finish_one()
        assert final == [None]
    assert store.items == worker.state.history


def test_a_turn_over_the_batch_bound_is_written_in_several_batches() -> None:
    store = FakeStore()
    worker = FakeWorker()
    writer = TurnWriter(worker, Persistence(store=store, session_id="s"))  # type: ignore[arg-type]
    worker.state.history.extend(items(MAX_BATCH_ITEMS + 5))
    answers: list[str | None] = []
    assert writer.save(answers.append, usage=Usage(prompt_tokens=3, total_tokens=3))
    worker.finish_one()
    assert answers == [None]
    assert [len(b.items) for b in store.batches] == [MAX_BATCH_ITEMS, 5]
    assert store.batches[0].usage is None and store.batches[1].usage is not None
    assert store.items == worker.state.history


def test_usage_and_alerts_of_a_failed_append_go_with_the_next() -> None:
    store = FakeStore()
    worker = FakeWorker()
    persistence = Persistence(store=store, session_id="s")  # type: ignore[arg-type]
    writer = TurnWriter(worker, persistence)
    worker.state.history.extend(items(2))
    persistence.alerts.tell(Alert(level=AlertLevel.WARN, text="w", session="s", source="t"))
    store.fail = True
    answers: list[str | None] = []
    writer.save(answers.append, usage=Usage(prompt_tokens=5, total_tokens=5))
    worker.finish_one()
    assert answers == ["injected"]
    store.fail = False
    writer.save(answers.append)
    worker.finish_one()
    assert answers[-1] is None
    (batch,) = store.batches
    assert batch.usage == Usage(prompt_tokens=5, total_tokens=5)
    assert [a.text for a in batch.alerts] == ["w"]


# -- reload after a restart ------------------------------------------------------------------------


@given(
    stored=st.integers(0, 6),
    unsaved=st.integers(0, 4),
    in_flight=st.integers(0, 4),
)
def test_a_reload_keeps_the_store_and_unsaved_reported_turns_and_drops_the_turn_in_flight(
    stored: int, unsaved: int, in_flight: int
) -> None:
    memory = items(stored + unsaved + in_flight)
    history, kept, lost = merge_reload(memory, memory[:stored], stored + unsaved)
    assert history == memory[: stored + unsaved]
    assert (kept, lost) == (unsaved, in_flight)


def test_a_reload_trusts_the_store_when_memory_disagrees() -> None:
    memory = items(4)
    stored = [AssistantMessage(text="something else"), *memory[1:2]]
    history, kept, lost = merge_reload(memory, stored, 4)
    assert history == stored and kept == 0 and lost == 2


def test_chunks() -> None:
    assert chunks([]) == []
    assert chunks(items(3), 2) == [tuple(items(2)), tuple(items(1, 2))]


def test_the_alert_tap_is_bounded_and_gives_back_in_order() -> None:
    tap = AlertTap(maxlen=3)
    alerts = [Alert(level=AlertLevel.INFO, text=str(i), source="t") for i in range(5)]
    for alert in alerts:
        tap.tell(alert)
    assert len(tap) == 3  # the oldest went
    taken = tap.take(2)
    assert [a.text for a in taken] == ["2", "3"]
    tap.give_back(taken)
    assert [a.text for a in tap.take()] == ["2", "3", "4"]


# -- stored settings -------------------------------------------------------------------------------


def test_an_openai_compatible_model_is_stored_without_credentials_and_rebuilt() -> None:
    model = OpenAICompatible(
        base_url="http://127.0.0.1:9/v1", model="m1", api_key="sk-x", max_output_tokens=99
    )
    settings_ = model_settings(model)
    assert "sk-x" not in str(settings_)
    again = rebuild_model(settings_, "s")
    assert isinstance(again, OpenAICompatible)
    assert (again.base_url, again.name, again.max_output_tokens) == (
        "http://127.0.0.1:9/v1",
        "m1",
        99,
    )


def test_an_anthropic_model_is_stored_without_credentials_and_rebuilt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = AnthropicModel(
        base_url="http://127.0.0.1:9",
        model="claude-x",
        api_key="sk-ant-secret",
        max_output_tokens=512,
        cache_ttl="1h",
        thinking_budget=2048,
        fork_tool_choice="as_requested",
        stream=False,
    )
    settings_ = model_settings(model)
    assert "sk-ant-secret" not in str(settings_)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    again = rebuild_model(settings_, "s")
    assert isinstance(again, AnthropicModel)
    assert again.api_key == "sk-ant-from-env"  # the key comes from the environment
    assert model_settings(again) == settings_
    assert (again.base_url, again.name, again.max_output_tokens) == (
        "http://127.0.0.1:9",
        "claude-x",
        512,
    )
    assert (again.cache_ttl, again.fork_tool_choice, again.stream_answers) == (
        "1h",
        "as_requested",
        False,
    )


def test_an_anthropic_base_url_with_a_password_is_never_stored() -> None:
    model = AnthropicModel(base_url="http://u:pw@127.0.0.1:9", api_key="k")
    settings_ = model_settings(model)
    assert "pw" not in str(settings_) and "base_url" not in settings_
    with pytest.raises(ModelNotRebuildable, match="password"):
        rebuild_model(settings_, "s")


def test_a_base_url_with_a_password_is_never_stored() -> None:
    model = OpenAICompatible(base_url="http://user:pw@127.0.0.1:9/v1", model="m", api_key="")
    settings_ = model_settings(model)
    assert "pw" not in str(settings_) and "base_url" not in settings_
    with pytest.raises(ModelNotRebuildable, match="password"):
        rebuild_model(settings_, "s")


def test_an_in_process_model_is_not_rebuilt() -> None:
    with pytest.raises(ModelNotRebuildable, match="ScriptedModel"):
        rebuild_model(model_settings(ScriptedModel([])), "s")


def test_a_system_prompt_that_looks_like_a_credential_is_left_out_and_named() -> None:
    args = SessionArgs(model=ScriptedModel([]), system_prompt="Bearer abc")
    config, notes = session_config(args)
    assert "system_prompt" not in config
    assert notes and "system prompt was not stored" in notes[0]
    big = SessionArgs(model=ScriptedModel([]), system_prompt="x" * 100_000)
    config, notes = session_config(big)
    assert "system_prompt" not in config and notes


def test_stored_args_take_overrides_first_and_name_missing_tools(tmp_path: Path) -> None:
    def tool_a(x: str) -> str:
        """A.

        Args:
            x: x
        """
        return x

    original = SessionArgs(
        model=ScriptedModel([]),
        workspace=tmp_path,
        system_prompt="be kind",
        tools=(tool_a,),
        builtin=("read_file",),
        max_turns=7,
        wrap_up=True,
        speculation=SpeculationConfig(enabled=True, max_turns=3),
    )
    config, _ = session_config(original)
    model = ScriptedModel([])
    args, warnings = stored_args(
        config, model=model, workspace=str(tmp_path), overrides={"max_turns": 9}
    )
    assert args.system_prompt == "be kind" and args.max_turns == 9
    assert args.builtin == ("read_file",) and args.wrap_up is True
    assert args.speculation == SpeculationConfig(enabled=True, max_turns=3)
    assert any("tool_a" in w for w in warnings)
    args, warnings = stored_args(
        config, model=model, workspace=str(tmp_path), overrides={"tools": (tool_a,)}
    )
    assert not any("tool_a" in w for w in warnings)


def test_summary_lines_show_age_turns_title_and_id() -> None:
    row = SimpleNamespace(
        session_id="abc", title="fix it", updated_at=0.0, turn_count=3, leased_by=None
    )
    (line,) = summary_lines([row], now=7200.0)
    assert "2 h" in line and "3 turns" in line and "fix it" in line and "(abc)" in line


# -- blob retention: references that appear while a collection runs --------------------------------


def test_a_blob_referenced_between_the_plan_and_the_removal_is_kept(tmp_path: Path) -> None:
    blobs = FsBlobStore(tmp_path, fsync=False, max_age_s=0.0)
    kept = blobs.store(Text(text="quoted by a session stored meanwhile"), owner="s")
    gone = blobs.store(Text(text="quoted by nobody"), owner="s")
    now = 10**10
    report = blobs.collect((), now=now, confirm=lambda: {str(kept)})
    assert report.removed == (gone,)
    assert kept in report.protected and blobs.exists(kept)


def test_a_failing_reference_source_removes_nothing(tmp_path: Path) -> None:
    blobs = FsBlobStore(tmp_path, fsync=False, max_age_s=0.0)
    blob = blobs.store(Text(text="x"), owner="s")

    def broken() -> set[str]:
        raise OSError("the store is down")

    with pytest.raises(OSError):
        blobs.collect((), now=10**10, confirm=broken)
    assert blobs.exists(blob)
    assert uuid.UUID(str(blob)) == blob
