"""Cutting calls out of a finished speculation transcript (``hand_over``): pure functions.

Whatever is cut, the rest stays paired and in order, the cut calls come back in
order, and no empty assistant message is left behind.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.speculation.transcript import cancelled_calls, hand_over
from fore.actors.worker.state import pairing_problems
from fore.messages.conversation import AssistantMessage, Item, ToolCall, ToolResult, UserMessage


def tc(call_id: str) -> ToolCall:
    return ToolCall(id=call_id, name=f"tool_{call_id}", arguments={})


def result(call_id: str, output: str = "ok", error: bool = False) -> ToolResult:
    return ToolResult(call_id=call_id, name=f"tool_{call_id}", output=output, is_error=error)


TRANSCRIPT: list[Item] = [
    UserMessage(text="go"),
    AssistantMessage(text="", tool_calls=(tc("a"),)),
    result("a"),
    AssistantMessage(text="", tool_calls=(tc("b"), tc("c"))),
    result("b"),
    result("c", "Cancelled: speculation time budget reached", error=True),
]


def test_a_cancelled_call_is_handed_over_and_its_result_dropped() -> None:
    cut = cancelled_calls(TRANSCRIPT, "Cancelled: speculation time budget reached")
    assert cut == ["c"]
    kept, calls = hand_over(TRANSCRIPT, cut)
    assert calls == (tc("c"),)
    assert kept[-2] == AssistantMessage(text="", tool_calls=(tc("b"),))
    assert kept[-1] == result("b")
    assert pairing_problems(kept) == []


def test_an_emptied_assistant_message_is_dropped() -> None:
    kept, calls = hand_over(TRANSCRIPT, ["b", "c"])
    assert calls == (tc("b"), tc("c"))
    assert kept == tuple(TRANSCRIPT[:3])  # the previous call's results are the tail again


def test_nothing_to_cut_changes_nothing() -> None:
    assert hand_over(TRANSCRIPT, []) == (tuple(TRANSCRIPT), ())
    assert cancelled_calls(TRANSCRIPT, "Cancelled: something else") == []


@settings(deadline=None)  # measures no time: a loaded machine's pause is not a failure
@given(st.data())
def test_any_cut_keeps_the_rest_paired(data: st.DataObject) -> None:
    batches = data.draw(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=4))
    items: list[Item] = [UserMessage(text="go")]
    ids: list[str] = []
    for n, size in enumerate(batches):
        calls = tuple(tc(f"{n}-{i}") for i in range(size))
        text = data.draw(st.sampled_from(["", "thinking"]))
        items.append(AssistantMessage(text=text, tool_calls=calls))
        items.extend(result(c.id) for c in calls)
        ids.extend(c.id for c in calls)
    cut = data.draw(st.lists(st.sampled_from(ids), unique=True))
    kept, calls = hand_over(items, cut)
    assert pairing_problems(kept) == []
    assert [c.id for c in calls] == [i for i in ids if i in set(cut)]
    assert all(
        i.text or i.tool_calls for i in kept if isinstance(i, AssistantMessage)
    )  # nothing empty left behind
