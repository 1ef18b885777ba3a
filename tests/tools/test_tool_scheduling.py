"""The pool's pure scheduler: FIFO round-robin across sessions under two caps.

``FairQueue`` is plain code, so it is tested directly: a deterministic
replay of the starvation the audit found (newcomers served LIFO), and a
Hypothesis property over random interleavings of pushes, pops, finishes and
cap changes that checks the caps, work conservation, per-session FIFO and
the round-robin bound (while a session can run, nobody else is served twice
before it, and it waits only for the sessions that were in line before it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fore.actors.tools.scheduling import FairQueue


def test_an_early_waiter_is_not_starved_by_a_stream_of_new_sessions() -> None:
    # The audit's repro (G4): a hog holds the global cap; "early" queues one
    # call; then every time a slot frees, a brand-new session arrives.
    q: FairQueue[str] = FairQueue(global_cap=2, session_cap=8)
    q.push("hog", "h1")
    q.push("hog", "h2")
    assert q.pop_runnable() == ("hog", "h1")
    assert q.pop_runnable() == ("hog", "h2")
    q.push("early", "E")
    served: list[tuple[str, str]] = []
    for i in range(10):
        q.push(f"late{i}", f"L{i}")
        q.finished(served[-1][0] if served else "hog")
        picked = q.pop_runnable()
        assert picked is not None
        served.append(picked)
    items = [item for _, item in served]
    assert items[0] == "E"  # the session that waited first goes first
    assert items[1:] == [f"L{i}" for i in range(9)]  # then the newcomers, in arrival order


def test_sessions_waiting_for_a_slot_are_served_in_arrival_order() -> None:
    q: FairQueue[str] = FairQueue(global_cap=1, session_cap=8)
    for i in range(5):
        q.push("hog", f"h{i}")
    assert q.pop_runnable() == ("hog", "h0")
    for name in ("a", "b", "c"):
        q.push(name, name)
    order = []
    for _ in range(6):
        running = order[-1][0] if order else "hog"
        q.finished(running)
        picked = q.pop_runnable()
        assert picked is not None
        order.append(picked)
    # Newcomers join the line in arrival order, ahead of the session served
    # last, and the hog takes its turn after them -- then round-robin goes on.
    assert [s for s, _ in order] == ["a", "b", "c", "hog", "hog", "hog"]


def test_a_session_at_its_cap_keeps_its_turn() -> None:
    q: FairQueue[str] = FairQueue(global_cap=3, session_cap=1)
    q.push("a", "a1")
    q.push("a", "a2")
    q.push("b", "b1")
    q.push("b", "b2")
    q.push("c", "c1")
    assert [q.pop_runnable() for _ in range(3)] == [("a", "a1"), ("b", "b1"), ("c", "c1")]
    assert q.pop_runnable() is None
    q.finished("c")
    assert q.pop_runnable() is None  # a and b are at their cap, c has nothing left
    q.finished("b")
    assert q.pop_runnable() == ("b", "b2")
    q.finished("a")
    assert q.pop_runnable() == ("a", "a2")


# -- the property -------------------------------------------------------------------------

SESSIONS = [f"s{i}" for i in range(7)]

operation = st.one_of(
    st.tuples(st.just("push"), st.sampled_from(SESSIONS), st.integers(1, 4)),
    st.tuples(st.just("pop"), st.just(""), st.just(0)),
    st.tuples(st.just("pop"), st.just(""), st.just(0)),
    st.tuples(st.just("finish"), st.sampled_from(SESSIONS), st.just(0)),
    st.tuples(st.just("cap"), st.sampled_from(SESSIONS), st.integers(0, 3)),
    st.tuples(st.just("remove"), st.sampled_from(SESSIONS), st.just(0)),
)


@dataclass
class Model:
    """What the test knows independently of the queue."""

    ready: dict[str, deque[int]] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    others_served: dict[str, dict[str, int]] = field(default_factory=dict)
    """For each session that can run now: how often each other session was served since."""
    allowed: dict[str, int] = field(default_factory=dict)
    """For each such session: how many serves of others it may see before its own turn."""
    last_served: str = ""


@settings(max_examples=500, deadline=None)
@example(  # a newcomer that empties and comes back must not overtake a waiter twice
    global_cap=1,
    session_cap=2,
    ops=[
        ("push", "s0", 2),
        ("pop", "", 0),
        ("push", "s1", 1),
        ("finish", "s0", 0),
        ("pop", "", 0),
        ("push", "s1", 1),
        ("finish", "s1", 0),
        ("pop", "", 0),
    ],
)
@given(
    global_cap=st.integers(1, 6),
    session_cap=st.integers(1, 4),
    ops=st.lists(operation, max_size=120),
)
def test_fair_queue_properties(
    global_cap: int, session_cap: int, ops: list[tuple[str, str, int]]
) -> None:
    q: FairQueue[int] = FairQueue(global_cap=global_cap, session_cap=session_cap)
    m = Model()
    serial = 0

    def eligible(session: str) -> bool:
        return bool(m.ready.get(session)) and m.running.get(session, 0) < q.session_cap(session)

    def refresh() -> None:
        # A session that can run starts (or keeps) its watch; one that cannot drops it.
        # Its turn comes after at most every other session with work queued now (plus
        # the newcomers that arrive while it is the session served last, see push).
        for s in SESSIONS:
            if eligible(s):
                if s not in m.others_served:
                    m.others_served[s] = {}
                    m.allowed[s] = sum(1 for o in SESSIONS if o != s and m.ready.get(o))
            else:
                m.others_served.pop(s, None)

    for kind, session, n in ops:
        if kind == "push":
            if not m.ready.get(session) and m.last_served in m.others_served:
                # A newcomer queues ahead of the session served last (and only that one).
                m.allowed[m.last_served] += 1
            for _ in range(n):
                serial += 1
                q.push(session, serial)
                m.ready.setdefault(session, deque()).append(serial)
        elif kind == "pop":
            picked = q.pop_runnable()
            if picked is None:
                # Work-conserving: nothing is left waiting that could run.
                assert q.running_total >= global_cap or not any(eligible(s) for s in SESSIONS)
            else:
                served, item = picked
                assert eligible(served), "served a session that was at its cap or had nothing"
                assert item == m.ready[served].popleft(), "items of a session left out of order"
                m.running[served] = m.running.get(served, 0) + 1
                for waiter, counts in m.others_served.items():
                    if waiter == served:
                        continue
                    counts[served] = counts.get(served, 0) + 1
                    assert counts[served] <= 1, (
                        f"{served} was served twice while {waiter} could run and waited"
                    )
                    assert sum(counts.values()) <= m.allowed[waiter], (
                        f"{waiter} could run but waited behind {sum(counts.values())} serves"
                    )
                m.others_served.pop(served, None)
                m.last_served = served
        elif kind == "finish":
            if m.running.get(session, 0) > 0:
                q.finished(session)
                m.running[session] -= 1
        elif kind == "cap":
            q.set_session_cap(session, n or None)
            m.others_served.pop(session, None)  # its eligibility was just redefined
        elif kind == "remove":
            taken = q.remove(session, lambda item: item % 2 == 0)
            kept = deque(i for i in m.ready.get(session, deque()) if i % 2 != 0)
            assert sorted(taken) == sorted(i for i in m.ready.get(session, ()) if i % 2 == 0)
            m.ready[session] = kept
        refresh()
        # The caps bound what runs, whatever happened.
        assert q.running_total == sum(m.running.values())
        assert q.running_total <= global_cap
        assert q.queued() == sum(len(d) for d in m.ready.values())
        for s in SESSIONS:
            assert q.running(s) == m.running.get(s, 0)
