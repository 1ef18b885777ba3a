"""The worker under a hostile (or merely small) model: issue 20, points 6, 10 and 13.

* an empty answer stays in history (two user messages in a row are what real
  servers and chat templates reject or mis-render);
* an answer with thousands of tool calls ends as a normal turn: every hook
  chain and continuation is iterative (the old chain recursed once per call
  and crashed the worker at about 165 calls), and calls past the per-answer
  cap get an error result each;
* tool arguments that are not a JSON object are handed back to the model as
  an error result so it can correct itself, a bounded number of times per run;
  then they are the protocol error they used to be at once.

Real sessions on a real Runtime; the raw-arguments model runs its answers
through the real wire assembler, and one test goes over loopback HTTP to the
mock server.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from fore.actors.llm import (
    FunctionModel,
    OpenAICompatible,
    RetryPolicy,
    ScriptedModel,
    StreamAssembler,
    StreamResult,
)
from fore.actors.llm.codec import tool_call
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.tools import FunctionTool, ToolContext
from fore.actors.worker.hookrun import DetachedChain, HookGate, HookJob
from fore.actors.worker.hooks import HookEvent, Hooks, HookSpec, Skip
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.worker import DEFAULT_MAX_BATCH_CALLS, WorkerConfig
from fore.messages.conversation import (
    MAX_ARGUMENTS_ERROR,
    AssistantMessage,
    ToolResult,
    invalid_arguments,
)
from fore.messages.llm import LlmRequest, Usage
from fore.messages.session import TurnResult
from fore.supervision import Runtime

WAIT = 60.0


class Counter:
    """A tool that counts how often it really ran (and with what)."""

    def __init__(self) -> None:
        self.runs = 0
        self.labels: list[str] = []
        self.lock = threading.Lock()

    def tool(self) -> FunctionTool[Any]:
        class Args(BaseModel):
            label: str = ""

        def run(args: Args, ctx: ToolContext) -> str:
            with self.lock:
                self.runs += 1
                self.labels.append(args.label)
            return f"counted {args.label}"

        return FunctionTool("count", "counts", Args, run)


def results(turn: TurnResult) -> list[ToolResult]:
    return [i for i in turn.items if isinstance(i, ToolResult)]


def roles(messages: Sequence[Any]) -> list[str]:
    return [type(m).__name__ for m in messages]


def no_two_user_turns_in_a_row(messages: Sequence[Any]) -> bool:
    kinds = roles(messages)
    return not any(a == b == "UserMessage" for a, b in itertools.pairwise(kinds))


# -- point 6: an empty answer is kept -------------------------------------------------------


def test_an_empty_answer_stays_in_history(runtime: Runtime, workspace: Path) -> None:
    model = FunctionModel(lambda request: "" if len(request.messages) == 1 else "Now I answer.")
    with runtime.open_session(workspace=workspace, model=model) as s:
        first = s.submit("hi", timeout=WAIT)
        assert first.status == "completed"
        assert roles(first.items) == ["UserMessage", "AssistantMessage"]
        assert first.items[-1] == AssistantMessage(text="")
        second = s.submit("are you there?", timeout=WAIT)
        assert second.status == "completed"
        sent = model.requests[-1].messages
        assert roles(sent) == ["UserMessage", "AssistantMessage", "UserMessage"]
        assert no_two_user_turns_in_a_row(s.history)


def test_an_empty_final_answer_after_tools_stays_in_history(
    runtime: Runtime, workspace: Path
) -> None:
    counter = Counter()

    def decide(request: LlmRequest) -> Any:
        if len(request.messages) == 1:
            return {"tool_calls": [{"name": "count", "arguments": {"label": "a"}}]}
        return ""

    model = FunctionModel(decide)
    with runtime.open_session(workspace=workspace, model=model, tools=[counter.tool()]) as s:
        turn = s.submit("count", timeout=WAIT)
        assert turn.status == "completed"
        assert turn.items[-1] == AssistantMessage(text="")
        s.submit("and now?", timeout=WAIT)
        assert no_two_user_turns_in_a_row(model.requests[-1].messages)
        assert pairing_problems(s.history) == []


# -- point 10: thousands of tool calls in one answer -------------------------------------------


def many_calls(n: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "count", "arguments": {"label": str(i)}} for i in range(n)]}


def hooks_for(variant: str) -> Hooks:
    """Hooks change the path a call takes through the worker (inline vs the hook lane)."""
    hooks = Hooks()
    if variant == "non-matching hooks":  # every chain ends at once, inline
        hooks.pre_tool_call(lambda ctx: None, tools="other*")
        hooks.post_tool_call(lambda ctx: None, tools="other*")
    elif variant == "matching hooks":  # every running call's chains go through the lane
        hooks.pre_tool_call(lambda ctx: None, tools="count")
        hooks.post_tool_call(lambda ctx: None, tools="count")
    return hooks


@pytest.mark.parametrize("variant", ["no hooks", "non-matching hooks", "matching hooks"])
def test_ten_thousand_calls_in_one_answer_end_as_a_normal_turn(
    runtime: Runtime, workspace: Path, variant: str
) -> None:
    counter = Counter()
    model = ScriptedModel([many_calls(10_000), {"text": "Counted."}] * 3)
    with runtime.open_session(
        workspace=workspace, model=model, tools=[counter.tool()], hooks=hooks_for(variant)
    ) as s:
        # Several times in a row: the old crash, repeated, made the supervisor give up.
        for round_ in range(1, 4):
            turn = s.submit("count a lot", timeout=WAIT)
            assert turn.status == "completed", turn.error
            assert turn.items[-1].text == "Counted."
            done = results(turn)
            assert len(done) == 10_000
            cap = DEFAULT_MAX_BATCH_CALLS
            assert [r.output for r in done[:cap]] == [f"counted {i}" for i in range(cap)]
            refused = done[cap:]
            assert all(r.is_error and r.output.startswith("Not run:") for r in refused)
            assert f"at most {cap}" in refused[0].output and "10000 tool calls" in refused[0].output
            assert counter.runs == cap * round_
        assert pairing_problems(s.history) == []
        assert not [a for a in s.alerts if "worker failed" in a.text]


def test_the_chains_stay_flat_when_every_call_runs(runtime: Runtime, workspace: Path) -> None:
    """With the cap raised, 2,000 calls each pass two empty hook chains, iteratively."""
    counter = Counter()
    model = ScriptedModel([many_calls(2_000), {"text": "Counted."}])
    with runtime.open_session(
        workspace=workspace,
        model=model,
        tools=[counter.tool()],
        hooks=hooks_for("non-matching hooks"),
        max_batch_calls=2_000,
    ) as s:
        turn = s.submit("count a lot", timeout=WAIT)
        assert turn.status == "completed", turn.error
        assert counter.runs == 2_000
        assert all(not r.is_error for r in results(turn))


def test_many_skipping_hooks_and_the_cap_is_configurable(runtime: Runtime, workspace: Path) -> None:
    counter = Counter()
    hooks = Hooks()
    hooks.pre_tool_call(lambda ctx: Skip("not this one") if ctx.arguments["label"] == "1" else None)
    model = ScriptedModel([many_calls(5), {"text": "Counted."}])
    with runtime.open_session(
        workspace=workspace, model=model, tools=[counter.tool()], hooks=hooks, max_batch_calls=3
    ) as s:
        turn = s.submit("count", timeout=WAIT)
        assert turn.status == "completed"
        outputs = [r.output for r in results(turn)]
        assert outputs[0] == "counted 0"
        assert outputs[1] == "Skipped: not this one"
        assert outputs[2] == "counted 2"
        assert all("at most 3" in o for o in outputs[3:]) and len(outputs) == 5
        assert counter.labels == ["0", "2"]


def test_worker_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_batch_calls"):
        WorkerConfig(
            session_id="s",
            model=None,
            gateway=None,
            tool_pool=None,
            fs=None,
            tools=None,  # type: ignore[arg-type]
            max_batch_calls=0,
        )
    with pytest.raises(ValueError, match="max_argument_retries"):
        WorkerConfig(
            session_id="s",
            model=None,
            gateway=None,
            tool_pool=None,
            fs=None,
            tools=None,  # type: ignore[arg-type]
            max_argument_retries=-1,
        )


class InlineLane:
    """A hook lane that runs each job at once, on the caller's thread (or refuses it)."""

    def __init__(self, *, refuse: bool = False) -> None:
        self.refuse = refuse
        self.parked: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.park = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.refuse:
            raise RuntimeError("the lane is shut down")
        if self.park:
            self.parked.append((fn, args))
            return
        fn(*args)


class NoTimer:
    class _Handle:
        def cancel(self) -> None:
            pass

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> Any:
        return self._Handle()


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.warnings.append(event)


@pytest.mark.parametrize("refuse", [False, True], ids=["inline lane", "shut-down lane"])
def test_a_detached_chain_of_thousands_of_hooks_runs_iteratively(refuse: bool) -> None:
    """Each hook answered before the lane returns asks for the next: a loop, not a recursion."""
    ran: list[int] = []

    def hook(i: int) -> Callable[[Any], None]:
        return lambda ctx: ran.append(i)

    specs = [
        HookSpec(event=HookEvent.ON_ABORT, fn=hook(i), name=f"h{i}", seq=i) for i in range(3_000)
    ]
    log = Log()
    chain = DetachedChain(
        HookEvent.ON_ABORT,
        specs,
        ctx=None,
        lane=InlineLane(refuse=refuse),
        timer=NoTimer(),
        gate=HookGate(),
        cap=1,
        default_timeout=5.0,
        start_timeout=5.0,
        log=log,
    )
    chain.start()
    if refuse:
        assert ran == [] and log.warnings.count("detached_hook_failed") == 3_000
    else:
        assert ran == list(range(3_000)) and chain.ran == [f"h{i}" for i in range(3_000)]


def test_a_shut_down_lane_answers_thousands_of_waiting_hooks_iteratively() -> None:
    lane = InlineLane()
    lane.park = True
    gate = HookGate()
    answered: list[BaseException | None] = []
    spec = HookSpec(event=HookEvent.PRE_TOOL_CALL, fn=lambda ctx: None, name="h")

    def job() -> HookJob:
        return HookJob(
            spec, None, on_start=lambda j: None, on_done=lambda j, r, e: answered.append(e)
        )

    gate.submit(job(), lane, cap=1)  # takes the one slot, parked on the lane
    for _ in range(3_000):
        gate.submit(job(), lane, cap=1)  # wait in the gate
    lane.refuse = True
    fn, args = lane.parked.pop()
    fn(*args)  # the first one runs; the slot goes to each waiting job, which the lane refuses
    assert len(answered) == 3_001
    assert answered[0] is None and all(isinstance(e, RuntimeError) for e in answered[1:])
    assert gate.active == 0


# -- point 13: tool arguments that are not JSON ------------------------------------------------


Raw = str | list[tuple[str, str]]
"""An answer: text, or tool calls as ``(name, raw arguments text)``."""


class RawArgumentsModel:
    """A model whose tool-call arguments are raw text, through the real stream assembler.

    ``decide(request)`` returns the answer (see :data:`Raw`); the answer is
    turned into the OpenAI stream chunks a server would send and assembled by
    :class:`StreamAssembler`, exactly as a streamed HTTP answer is.
    """

    name = "raw"
    retry = RetryPolicy(max_retries=0)

    def __init__(self, decide: Callable[[LlmRequest], Raw]) -> None:
        self.decide = decide
        self.requests: list[LlmRequest] = []
        self._ids = iter(range(1_000_000))

    async def stream(self, request: LlmRequest, emit: Any, http: httpx.AsyncClient) -> Any:
        self.requests.append(request)
        answer = self.decide(request)
        assembler = StreamAssembler(request.request_id, text_events=False, tool_events=False)
        if isinstance(answer, str):
            assembler.feed({"choices": [{"index": 0, "delta": {"content": answer}}]})
        else:
            for index, (name, raw) in enumerate(answer):
                call = {
                    "index": index,
                    "id": f"call_{next(self._ids)}",
                    "function": {"name": name, "arguments": raw},
                }
                assembler.feed({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
        assembler.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        message, _usage, reason = assembler.finish(saw_done=True)
        return StreamResult(message, Usage(), reason)


def last_results(request: LlmRequest) -> list[ToolResult]:
    tail: list[ToolResult] = []
    for item in reversed(request.messages):
        if not isinstance(item, ToolResult):
            break
        tail.insert(0, item)
    return tail


BROKEN = '{"label": "x" "y"}'


def test_invalid_arguments_are_handed_back_and_the_model_corrects_itself(
    runtime: Runtime, workspace: Path
) -> None:
    counter = Counter()

    def decide(request: LlmRequest) -> Raw:
        answers = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if answers == 0:  # one broken call next to a good one
            return [("count", BROKEN), ("count", '{"label": "good"}')]
        if answers == 1:  # corrected
            return [("count", '{"label": "fixed"}')]
        return "Counted."

    model = RawArgumentsModel(decide)
    with runtime.open_session(workspace=workspace, model=model, tools=[counter.tool()]) as s:  # type: ignore[arg-type]
        turn = s.submit("count", timeout=WAIT)
        assert turn.status == "completed", turn.error
        assert counter.labels == ["good", "fixed"]  # the broken call never ran
        bad, good = last_results(model.requests[1])
        assert good.output == "counted good" and not good.is_error
        assert bad.is_error
        assert "not valid JSON" in bad.output and "at char 14" in bad.output
        assert '"x" "y"' in bad.output  # the model sees what it sent
        assert "Call count again" in bad.output
        assert turn.items[-1].text == "Counted."
        assert pairing_problems(s.history) == []


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_invalid_arguments_end_the_run_once_the_bound_is_spent(
    runtime: Runtime, workspace: Path, retries: int
) -> None:
    counter = Counter()
    model = RawArgumentsModel(lambda request: [("count", BROKEN)])
    with runtime.open_session(
        workspace=workspace,
        model=model,  # type: ignore[arg-type]
        tools=[counter.tool()],
        max_argument_retries=retries,
    ) as s:
        turn = s.submit("count", timeout=WAIT)
        assert turn.status == "error"
        assert turn.error_kind == "llm"
        assert turn.error is not None
        assert "protocol" in turn.error and "not valid JSON" in turn.error
        assert len(model.requests) == retries + 1
        handed_back = [r for r in results(turn) if "not valid JSON" in r.output]
        assert len(handed_back) == retries
        assert counter.runs == 0
        # The answer that spent the bound is not in history, which stays well paired.
        assert pairing_problems(s.history) == []
        # The bound is per run: the next run starts afresh.
        model.decide = lambda request: "Fine."
        assert s.submit("again", timeout=WAIT).status == "completed"


def test_invalid_arguments_over_real_http(runtime: Runtime, workspace: Path) -> None:
    """The mock server's ``bad_tool_args`` fault: arguments that never form JSON."""
    script = ScriptFile.model_validate(
        {
            "replies": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
                {"when": {"contains": "alpha"}, "text": "It says alpha."},
            ]
        }
    )
    with MockLlmServer(script) as server:
        model = OpenAICompatible(
            base_url=server.base_url, api_key="k", model="mock", retry=RetryPolicy(max_retries=0)
        )
        with runtime.open_session(workspace=workspace, model=model) as s:
            server.queue_fault("bad_tool_args", count=1, session=s.id)
            turn = s.submit("what is in notes.txt?", timeout=WAIT)
            assert turn.status == "completed", turn.error
            first, second = results(turn)
            assert first.is_error and "not valid JSON" in first.output
            assert "alpha" in second.output
            assert turn.items[-1].text == "It says alpha."
            sent = server.requests()
            assert len(sent) == 3  # no retry of the whole request: the model corrected itself
            body = sent[1].body
            assert isinstance(body, dict)
            assert body["messages"][-1]["role"] == "tool"


def _finite(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(token)
    return value


def _no_constants(token: str) -> Any:
    raise ValueError(token)


def oracle(text: str) -> dict[str, Any] | None:
    """What a call's arguments should be: one JSON object of finite numbers, or nothing.

    Raw control characters inside strings are accepted (``strict=False``), as
    grammar-constrained servers emit them (issue 20, point 5).
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text, strict=False, parse_constant=_no_constants, parse_float=_finite)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@st.composite
def arguments_texts(draw: st.DrawFn) -> str:
    """Valid objects, other JSON values, arbitrary text, and objects with one edit."""
    kind = draw(st.sampled_from(["object", "value", "text", "edited"]))
    if kind == "text":
        return draw(st.text(max_size=200))
    value = (
        draw(json_values)
        if kind == "value"
        else draw(st.dictionaries(st.text(max_size=5), json_values, max_size=4))
    )
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    if kind != "edited" or not text:
        return text
    at = draw(st.integers(min_value=0, max_value=len(text) - 1))
    insert = draw(st.sampled_from(["", ",", '"', "}", "\n", "NaN", " 1e400", "\\"]))
    return text[:at] + insert + text[at + draw(st.integers(min_value=0, max_value=1)) :]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arguments_texts())
def test_any_arguments_text_becomes_a_call_or_a_bounded_reason(text: str) -> None:
    call = tool_call("c1", "count", text)
    expected = oracle(text)
    if call.arguments_error is None:
        assert expected is not None and call.arguments == expected
    else:
        assert expected is None, call.arguments_error
        assert call.arguments == {}
        assert call.arguments_error.startswith("arguments are not valid JSON: ")
        assert len(call.arguments_error) <= MAX_ARGUMENTS_ERROR


@given(
    st.text(max_size=5_000),
    st.text(max_size=1_000),
    st.one_of(st.none(), st.integers(min_value=0, max_value=6_000)),
)
def test_the_arguments_error_is_bounded_and_says_where(
    raw: str, reason: str, position: int | None
) -> None:
    text = invalid_arguments(raw, reason, position)
    assert len(text) <= MAX_ARGUMENTS_ERROR
    assert f"(of {len(raw)} chars)" in text
    if position is not None:
        assert f"at char {position}" in text
