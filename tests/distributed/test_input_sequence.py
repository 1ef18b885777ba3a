"""fore.distributed.input_sequence: a shard starts a session's inputs in the caller's order.

Plain code driven with explicit clock values: any arrival order starts the
inputs in number order; a number that never arrives holds the later ones
only until the deadline; a withdrawn one holds nothing.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.distributed.input_sequence import MAX_WITHDRAWN, InputSequence
from fore.errors import InputWithdrawn


class Recorder:
    """The inputs started, in order, and whether each started in its own ``arrive``."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.late: dict[int, bool] = {}

    def start(self, number: int) -> Any:
        def run(late: bool) -> None:
            self.started.append(number)
            self.late[number] = late

        return run


@given(st.permutations(range(8)))
def test_any_arrival_order_starts_the_inputs_in_number_order(order: list[int]) -> None:
    seq, seen = InputSequence(hold_s=1.0), Recorder()
    for number in order:
        started_now = seq.arrive(number, seen.start(number), now=0.0)
        # it starts in its own call exactly when every number before it has started
        assert started_now == (number in seen.late and not seen.late[number])
        assert seen.started == list(range(len(seen.started)))
    assert seen.started == list(range(8))
    assert seq.held == () and seq.next == 8
    assert seq.expire(now=100.0) == ()


@given(st.permutations(range(8)), st.sets(st.integers(0, 7), min_size=1, max_size=4))
def test_a_missing_number_holds_the_later_ones_only_until_the_deadline(
    order: list[int], missing: set[int]
) -> None:
    seq, seen = InputSequence(hold_s=1.0), Recorder()
    arrived = [n for n in order if n not in missing]
    for i, number in enumerate(arrived):
        seq.arrive(number, seen.start(number), now=float(i) * 0.01)
    first_gap = min(missing)
    # before the deadline nothing at or after the first missing number starts
    assert seen.started == list(range(first_gap))
    assert seq.expire(now=0.5) == ()
    assert seen.started == list(range(first_gap))
    # past every deadline all that arrived has started, in number order
    given_up = seq.expire(now=10.0)
    assert seen.started == sorted(arrived)
    assert given_up == tuple(sorted(n for n in missing if n < max(arrived, default=-1)))
    assert seq.held == ()
    # a given-up input that arrives after all starts at once (late, not lost)
    late = max(missing)
    if late < seq.next:
        assert seq.arrive(late, seen.start(late), now=20.0)
        assert seen.started[-1] == late


@given(st.permutations(range(6)), st.sets(st.integers(0, 5), min_size=1, max_size=3), st.data())
def test_a_withdrawn_number_holds_nothing(
    order: list[int], withdrawn: set[int], data: st.DataObject
) -> None:
    """A call cancelled before it started (or known lost) lets the next ones go at once,
    whether the withdrawal comes before or after they arrive."""
    seq, seen = InputSequence(hold_s=1.0), Recorder()
    arrived = [n for n in order if n not in withdrawn]
    events: list[tuple[str, int]] = [("arrive", n) for n in arrived]
    for n in sorted(withdrawn):
        events.insert(data.draw(st.integers(0, len(events)), label=f"withdraw {n} at"), ("w", n))
    for kind, number in events:
        if kind == "arrive":
            seq.arrive(number, seen.start(number), now=0.0)
        else:
            assert seq.withdraw(number)
    assert seen.started == sorted(arrived)
    assert seq.held == () and seq.next == 6
    assert seq.expire(now=100.0) == ()


def test_an_input_started_before_its_withdrawal_stays_started() -> None:
    seq, seen = InputSequence(), Recorder()
    assert seq.arrive(0, seen.start(0), now=0.0)
    assert not seq.withdraw(0)
    assert not seq.arrive(2, seen.start(2), now=0.0)
    assert seq.withdraw(2)  # held: it never starts
    assert seq.arrive(1, seen.start(1), now=0.0)
    assert seen.started == [0, 1] and seq.next == 3


def test_released_inputs_are_late_and_a_failing_one_does_not_stop_the_rest() -> None:
    seq, seen = InputSequence(), Recorder()

    def broken(late: bool) -> None:
        raise RuntimeError("the session closed")

    assert not seq.arrive(2, seen.start(2), now=0.0)
    assert not seq.arrive(1, broken, now=0.0)
    assert seq.arrive(0, seen.start(0), now=0.0)
    assert seen.started == [0, 2]
    assert seen.late == {0: False, 2: True}
    # the arriving input's own failure is its caller's (after the held ones started)
    assert not seq.arrive(4, seen.start(4), now=0.0)
    with pytest.raises(RuntimeError):
        seq.arrive(3, broken, now=0.0)
    assert seen.started == [0, 2, 4] and seq.next == 5


def test_the_deadline_is_the_earliest_held_inputs() -> None:
    seq, seen = InputSequence(hold_s=1.0), Recorder()
    assert seq.next_deadline() is None
    seq.arrive(3, seen.start(3), now=5.0)
    seq.arrive(1, seen.start(1), now=7.0)
    assert seq.next_deadline() == 6.0
    # 3's deadline lets 1 go as well (gaps 0 and 2 given up on), in order
    assert seq.expire(now=6.0) == (0, 2)
    assert seen.started == [1, 3]


def test_inputs_from_many_threads_start_in_number_order() -> None:
    """Each thread arrives a share of the numbers in its own order; whichever thread
    releases an input, they start one after the other in number order."""
    seq, seen = InputSequence(hold_s=60.0), Recorder()
    shares = [list(range(k, 400, 4))[::-1] if k % 2 else list(range(k, 400, 4)) for k in range(4)]
    barrier = threading.Barrier(4)

    def run(share: list[int]) -> None:
        barrier.wait(timeout=10)
        for number in share:
            seq.arrive(number, seen.start(number), now=0.0)

    threads = [threading.Thread(target=run, args=(share,)) for share in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen.started == list(range(400))


@given(st.integers(0, 5), st.sampled_from(["its turn", "ahead"]))
def test_a_withdrawn_input_that_arrives_after_all_is_refused(number: int, when: str) -> None:
    """The caller cancelled its call and withdrew its number, but the cancel did not stop
    the call (``ray.cancel`` raced with it): when it does arrive, it must not start -- a
    Tab the user gave up on, started behind the keys typed after it, would apply a
    speculation nobody accepted. It is refused, whether it was withdrawn on its turn (its
    turn passes) or ahead of it (held as withdrawn)."""
    seq, seen = InputSequence(hold_s=1.0), Recorder()
    if when == "its turn":
        for earlier in range(number):
            seq.arrive(earlier, seen.start(earlier), now=0.0)
    assert seq.withdraw(number)
    with pytest.raises(InputWithdrawn) as refused:
        seq.arrive(number, seen.start(number), now=0.0)
    assert refused.value.number == number
    # the others go on as if it had never been numbered
    for other in range(number + 3):
        if other != number and other not in seen.started:
            seq.arrive(other, seen.start(other), now=0.0)
    assert seen.started == [n for n in range(number + 3) if n != number]
    assert seq.held == () and seq.expire(now=100.0) == ()
    with pytest.raises(InputWithdrawn):  # and stays refused once its turn has passed
        seq.arrive(number, seen.start(number), now=0.0)


def test_a_number_given_up_on_still_starts_late_but_a_withdrawn_one_never() -> None:
    """Expiry gives up on a number nobody withdrew (its call may just be slow): it starts
    when it comes. A withdrawn one passed by the same expiry stays refused."""
    seq, seen = InputSequence(hold_s=1.0), Recorder()
    assert seq.withdraw(1)
    seq.arrive(3, seen.start(3), now=0.0)
    assert seq.expire(now=5.0) == (0, 2)  # 1 was withdrawn, not given up on
    assert seq.arrive(0, seen.start(0), now=6.0)  # late, not lost
    with pytest.raises(InputWithdrawn):
        seq.arrive(1, seen.start(1), now=6.0)
    assert seq.arrive(2, seen.start(2), now=6.0)
    assert seen.started == [3, 0, 2]


def test_the_withdrawn_numbers_remembered_are_bounded() -> None:
    """A caller withdrawing number after number does not grow the sequence without end:
    the oldest withdrawals are forgotten (such a call arriving that late starts late)."""
    seq, seen = InputSequence(), Recorder()
    total = MAX_WITHDRAWN + 10
    for number in range(total):
        assert seq.withdraw(number)
    assert seq.next == total
    assert len(seq.withdrawn) == MAX_WITHDRAWN
    with pytest.raises(InputWithdrawn):
        seq.arrive(total - 1, seen.start(total - 1), now=0.0)
    assert seq.arrive(0, seen.start(0), now=0.0)  # forgotten: late


def test_a_held_input_withdrawn_while_it_waits_is_refused_at_once() -> None:
    """The input arrived ahead of its turn and waits; then its caller withdraws it (the
    call was cancelled, but ``ray.cancel`` did not stop it). It must not start when its
    turn comes, and whoever waits for it must hear so now, not when its own deadline
    passes: its ``refuse`` is called with :class:`InputWithdrawn`."""
    seq, seen = InputSequence(hold_s=1.0), Recorder()
    refused: list[BaseException] = []
    assert not seq.arrive(2, seen.start(2), now=0.0, refuse=refused.append)
    assert seq.held == (2,)
    assert seq.withdraw(2)
    assert len(refused) == 1 and isinstance(refused[0], InputWithdrawn)
    assert refused[0].number == 2
    assert seq.held == () and seq.withdraw(2)  # withdrawn twice: refused once
    assert len(refused) == 1
    for number in (0, 1, 3):
        seq.arrive(number, seen.start(number), now=0.0)
    assert seen.started == [0, 1, 3]
    with pytest.raises(InputWithdrawn):
        seq.arrive(2, seen.start(2), now=0.0)


def test_withdrawals_ahead_of_the_next_number_are_bounded() -> None:
    """A caller withdrawing numbers far ahead leaves a marker for each until its turn: at
    most :data:`MAX_WITHDRAWN` are kept; past that a withdrawal is declined (False) and
    that input, should it come, waits its turn like any other."""
    seq, seen = InputSequence(hold_s=1.0), Recorder()
    ahead = [seq.withdraw(number) for number in range(1, 2 * MAX_WITHDRAWN)]
    assert ahead.count(True) == MAX_WITHDRAWN
    assert all(ahead[:MAX_WITHDRAWN]) and not any(ahead[MAX_WITHDRAWN:])
    declined = MAX_WITHDRAWN + 1
    assert not seq.arrive(declined, seen.start(declined), now=0.0)  # held, not refused
    seq.arrive(0, seen.start(0), now=0.0)  # 1..MAX_WITHDRAWN pass as withdrawn
    assert seen.started == [0, declined]
    assert seq.next == declined + 1


def _race_withdraw_against_release(head_start: int) -> str:
    """One race of :func:`test_a_withdrawal_racing_the_release_of_its_input_...`: who won.

    The withdrawing thread spins ``head_start`` steps after the barrier (negative: the
    releasing one does), so over many races both sides get to the lock first.
    """
    seq, seen = InputSequence(hold_s=60.0), Recorder()
    refused: list[int] = []
    assert not seq.arrive(1, seen.start(1), now=0.0, refuse=lambda e: refused.append(e.number))
    go = threading.Barrier(2)
    withdrew: list[bool] = []

    def release() -> None:
        go.wait(10)
        for _ in range(-head_start):
            pass
        seq.arrive(0, seen.start(0), now=0.0)

    def withdraw() -> None:
        go.wait(10)
        for _ in range(head_start):
            pass
        withdrew.append(seq.withdraw(1))

    threads = [threading.Thread(target=release), threading.Thread(target=withdraw)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    assert seq.held == () and seq.next == 2
    if withdrew == [True]:
        assert (seen.started, refused) == ([0], [1])
        return "refused"
    assert (withdrew, seen.started, refused) == ([False], [0, 1], [])
    return "started"


def test_a_withdrawal_racing_the_release_of_its_input_either_starts_it_or_refuses_it() -> None:
    """Input 1 is held behind 0; on two threads at once, 0 arrives (releasing 1) and 1 is
    withdrawn (its caller cancelled it). Both take the sequence's lock, so exactly one
    wins, every time: 1 started and the withdrawal answered False, or 1 refused (its
    ``refuse`` called once) and the withdrawal answered True -- never both, never neither,
    and 0 always starts. (Which interleavings occur is the scheduler's; each is checked.)"""
    won: Counter[str] = Counter()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the GIL changes hands inside arrive / withdraw too
    try:
        for _ in range(10):  # rounds of 300 races, until each side has won at least once
            won.update(_race_withdraw_against_release(spin) for spin in range(-3000, 3000, 20))
            if len(won) == 2:
                break
    finally:
        sys.setswitchinterval(interval)
    assert set(won) == {"refused", "started"}, won  # both orders were checked
