"""pykka's documented semantics, checked against :class:`PooledActor`.

pykka's own suite pins how ``tell``/``ask``/``stop``, the lifecycle hooks,
proxies and futures behave for ``ThreadingActor``. These tests restate those
behaviours (in our own words) for the pooled runtime, then check each
deliberate difference that ``actors/core/pooled.py`` documents.

Synchronisation is by events, futures and bounded waits only: a handler that
must stay busy waits on a ``threading.Event`` the test releases, and every wait
has a timeout so a bug fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import traceback
import types
import uuid
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any, Literal, NoReturn

import pykka
import pytest
from pydantic import ValidationError
from pykka import ActorDeadError, ActorProxy, ActorRef, CallableProxy, Timeout
from pykka.messages import ProxyCall, ProxyGetAttr, ProxySetAttr

from fore.actors.core.errors import ActorCrashed, AskTimeout, UnhandledMessageError
from fore.actors.core.future import PooledFuture
from fore.actors.core.handlers import handles
from fore.actors.core.pooled import ActorExit, PooledActor, stop_now
from fore.actors.core.system import ActorSystem
from fore.messages.base import ControlMessage, Message

WAIT = 5.0
"""Upper bound of every wait: generous, only reached when something is broken."""

SYSTEM_NAME = "t"
DISPATCH_PREFIX = f"{SYSTEM_NAME}-dispatch-"
BLOCKING_PREFIX = f"{SYSTEM_NAME}-blocking"


# -- messages -----------------------------------------------------------------


class Ping(Message):
    pass


class Note(Message):
    """Recorded in the probe's log; answered with its tag."""

    tag: str


class Urgent(ControlMessage):
    """Control-lane twin of :class:`Note`."""

    tag: str


class Hold(Message):
    """Keeps the actor busy until the probe's ``release`` event is set."""


class Fail(Message):
    text: str = "boom"


class Die(Message):
    how: Literal["exit", "interrupt"]


class Seen(Message):
    """Answered with the notes recorded so far (lifecycle entries excluded)."""


class WhereAmI(Message):
    """Answered with the handler's thread name."""


class StopTwice(Message):
    pass


class GreetThenStop(Message):
    pass


class Later(Message):
    """The handler takes over its reply with ``defer_reply()``."""


class Answer(Message):
    value: int


class Unknown(Message):
    """No actor has a handler for this."""


class Offload(Message):
    fail: bool = False
    with_on_error: bool = True


class Relay(Message):
    """Ask the peer (given at construction) a question without blocking."""

    fail: bool = False


class Arm(Message):
    """Arm a ``send_after`` timer delivering ``Note(tag)``; cancel it at once if asked."""

    delay: float
    tag: str
    cancel: bool = False


class CallLater(Message):
    delay: float
    tag: str


class Spawn(Message):
    """Start a child Worker from inside a handler; answered with its ref."""


# -- probes and actors ---------------------------------------------------------


class Probe:
    """What a test observes of an actor: an ordered log, events, captured values."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.log: list[str] = []
        self.threads: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        self.exits: list[ActorExit] = []
        self.received: list[Any] = []
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.failed = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.exited = threading.Event()
        self.failure: tuple[type[BaseException] | None, BaseException | None] | None = None

    def record(self, entry: str) -> None:
        with self._cond:
            self.log.append(entry)
            self._cond.notify_all()

    def notes(self) -> list[str]:
        with self._cond:
            return [entry for entry in self.log if not entry.startswith("<")]

    def entries(self) -> list[str]:
        with self._cond:
            return list(self.log)

    def wait_for(self, entry: str, timeout: float = WAIT) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: entry in self.log, timeout)

    def on_exit(self, record: ActorExit) -> None:
        self.exits.append(record)
        self.exited.set()


class Worker(PooledActor):
    """A typed actor exercising every hook; all it observes goes to its probe."""

    strict_messages = True

    def __init__(self, probe: Probe, peer: ActorRef[Any] | None = None) -> None:
        super().__init__()
        self.probe = probe
        self.peer = peer
        self.pending: PooledFuture[Any] | None = None

    def on_start(self) -> None:
        self.probe.threads["on_start"] = threading.current_thread().name
        registered = self.system.registry.get_by_urn(self.actor_urn) is not None
        self.probe.values["registered_in_on_start"] = registered
        self.probe.record("<on_start>")
        self.probe.started.set()

    def on_stop(self) -> None:
        self.probe.threads["on_stop"] = threading.current_thread().name
        self.probe.record("<on_stop>")
        self.probe.stopped.set()

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        self.probe.failure = (exception_type, exception_value)
        self.probe.record("<on_failure>")
        self.probe.failed.set()

    @handles(Ping)
    def _ping(self, message: Ping) -> str:
        return "pong"

    @handles(Note, Urgent)
    def _note(self, message: Note | Urgent) -> str:
        self.probe.record(message.tag)
        return message.tag

    @handles(Hold)
    def _hold(self, message: Hold) -> str:
        self.probe.entered.set()
        return "released" if self.probe.release.wait(WAIT) else "never released"

    @handles(Fail)
    def _fail(self, message: Fail) -> NoReturn:
        raise RuntimeError(message.text)

    @handles(Die)
    def _die(self, message: Die) -> NoReturn:
        if message.how == "exit":
            raise SystemExit(3)
        raise KeyboardInterrupt

    @handles(Seen)
    def _seen(self, message: Seen) -> list[str]:
        return self.probe.notes()

    @handles(WhereAmI)
    def _where(self, message: WhereAmI) -> str:
        return threading.current_thread().name

    @handles(StopTwice)
    def _stop_twice(self, message: StopTwice) -> None:
        self.stop()
        self.stop()

    @handles(GreetThenStop)
    def _greet_then_stop(self, message: GreetThenStop) -> None:
        self.actor_ref.tell(Note(tag="greetings"))
        self.stop()

    @handles(Later)
    def _later(self, message: Later) -> str:
        self.pending = self.defer_reply()
        self.probe.values["deferred_was_none"] = self.pending is None
        self.probe.done.set()
        return "the handler's return value is ignored"

    @handles(Answer)
    def _answer(self, message: Answer) -> None:
        assert self.pending is not None
        self.pending.set(message.value)

    @handles(Offload)
    def _offload(self, message: Offload) -> None:
        def work() -> int:
            self.probe.threads["work"] = threading.current_thread().name
            if message.fail:
                raise ValueError("blocking work failed")
            return 42

        self.run_blocking(
            work,
            then=self._offload_done,
            on_error=self._offload_error if message.with_on_error else None,
        )

    def _offload_done(self, result: int) -> None:
        self.probe.threads["then"] = threading.current_thread().name
        self.probe.values["result"] = result
        self.probe.done.set()

    def _offload_error(self, error: BaseException) -> None:
        self.probe.threads["on_error"] = threading.current_thread().name
        self.probe.values["error"] = error
        self.probe.done.set()

    @handles(Relay)
    def _relay(self, message: Relay) -> None:
        assert self.peer is not None
        question: Message = Fail(text="peer failed") if message.fail else Ping()
        self.ask_then(self.peer, question, then=self._relay_done, on_error=self._relay_error)

    def _relay_done(self, answer: Any) -> None:
        self.probe.threads["then"] = threading.current_thread().name
        self.probe.values["answer"] = answer
        self.probe.done.set()

    def _relay_error(self, error: BaseException) -> None:
        self.probe.threads["on_error"] = threading.current_thread().name
        self.probe.values["error"] = error
        self.probe.done.set()

    @handles(Arm)
    def _arm(self, message: Arm) -> None:
        handle = self.send_after(message.delay, Note(tag=message.tag))
        if message.cancel:
            handle.cancel()

    @handles(CallLater)
    def _call_later(self, message: CallLater) -> None:
        def later() -> None:
            self.probe.threads["call_after"] = threading.current_thread().name
            self.probe.record(message.tag)

        self.call_after(message.delay, later)

    @handles(Spawn)
    def _spawn(self, message: Spawn) -> ActorRef[Worker]:
        return Worker.start(Probe())


class ImpatientWorker(Worker):
    """Asks to this class time out after 0.2 s unless the caller says otherwise."""

    default_ask_timeout = 0.2


class SessionWorker(Worker):
    def __init__(self, probe: Probe, session: str) -> None:
        super().__init__(probe)
        self.session_id = session


class NamedWorker(Worker):
    registry_name = "the-singleton"


class SelfStarter(Worker):
    """Sends itself its first message from its constructor.

    pykka's docs suggest exactly this (a proxy or tell to self made in
    ``__init__``); the message must still wait for ``start()``: pykka runs
    ``on_start`` first, in the actor's context, never concurrently with
    ``__init__``.
    """

    def __init__(self, probe: Probe) -> None:
        super().__init__(probe)
        self.actor_ref.tell(Note(tag="kickoff"))
        # Not synchronisation: a window in which a runtime that wrongly runs
        # mail before start() would run it (and set the flag) while __init__
        # is still executing. A correct runtime simply lets it elapse.
        self.ran_during_init = probe.wait_for("kickoff", timeout=0.2)


class PanickyOnFailure(Worker):
    """Its on_failure hook itself raises a BaseException."""

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        super().on_failure(exception_type, exception_value, traceback)
        raise SystemExit(4)


class Observer(PooledActor):
    """Answers any ask with how many notes another actor's probe has recorded."""

    def __init__(self, watched: Probe) -> None:
        super().__init__()
        self.watched = watched

    def on_receive(self, message: Any) -> int:
        return len(self.watched.notes())


class Catcher(PooledActor):
    """An untyped actor (plain ``on_receive``): accepts any object, as pykka does."""

    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self.probe = probe

    def on_receive(self, message: Any) -> Any:
        if message == "ping":
            return "pong"
        self.probe.received.append(message)
        return None


class EarlyFailer(PooledActor):
    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self.probe = probe

    def on_start(self) -> None:
        try:
            raise RuntimeError("on_start failed")
        finally:
            self.probe.started.set()

    def on_failure(self, *_args: Any) -> None:
        self.probe.failed.set()


class EarlyStopper(PooledActor):
    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self.probe = probe

    def on_start(self) -> None:
        self.stop()

    def on_stop(self) -> None:
        self.probe.stopped.set()


class FailingOnStop(EarlyStopper):
    def on_stop(self) -> None:
        try:
            raise RuntimeError("on_stop failed")
        finally:
            self.probe.stopped.set()


class RaisingOnStop(Worker):
    def on_stop(self) -> None:
        super().on_stop()
        raise RuntimeError("on_stop failed")


class FailingOnFailure(Worker):
    def on_failure(self, *_args: Any) -> None:
        try:
            raise RuntimeError("on_failure failed")
        finally:
            self.probe.failed.set()


# Typed dispatch: a small message hierarchy.


class Animal(Message):
    pass


class Dog(Animal):
    pass


class Puppy(Dog):
    pass


class Cat(Animal):
    pass


class Fish(Message):
    pass


class Bird(Message):
    pass


class Zoo(PooledActor):
    strict_messages = True

    @handles(Animal)
    def _animal(self, message: Animal) -> str:
        return "animal"

    @handles(Dog)
    def _dog(self, message: Dog) -> str:
        return "dog"

    @handles(Fish, Bird)
    def _small(self, message: Fish | Bird) -> str:
        return f"small {type(message).__name__}"


class PuppyZoo(Zoo):
    @handles(Puppy)
    def _puppy(self, message: Puppy) -> str:
        return "puppy"


# Proxies: an actor with every kind of attribute pykka can proxy.


@pykka.traversable
class Deeper:
    def __init__(self) -> None:
        self.name = "deeper"

    def shout(self, text: str) -> str:
        return text.upper() + "!"


class Shallow:
    pykka_traversable = True

    def __init__(self) -> None:
        self.name = "shallow"
        self.deeper = Deeper()

    def twice(self, value: int) -> int:
        return 2 * value


class Opaque:
    """Not marked traversable: reachable only as a value."""

    inner = "opaque inner"


class Gadget(PooledActor):
    label = "gadget"
    _secret = "hidden"
    opaque = Opaque()
    marked = pykka.traversable(Opaque())

    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self.probe = probe
        self.count = 0
        self.trail: list[str] = []
        self.shallow = Shallow()
        self._rw = "initial"

    def on_stop(self) -> None:
        self.probe.stopped.set()

    def on_failure(self, *_args: Any) -> None:
        self.probe.failed.set()

    @property
    def read_only(self) -> str:
        return "read only"

    @property
    def read_write(self) -> str:
        return self._rw

    @read_write.setter
    def read_write(self, value: str) -> None:
        self._rw = value

    @property
    def shallow_copy(self) -> Shallow:
        return Shallow()

    def add(self, a: int, b: int) -> int:
        return a + b

    def bump(self) -> None:
        self.count += 1

    def explode(self) -> NoReturn:
        raise ValueError("exploded")

    def where(self) -> str:
        return threading.current_thread().name

    @staticmethod
    def double(value: int) -> int:
        return 2 * value

    @classmethod
    def kind(cls) -> str:
        return cls.__name__

    def add_method(self, name: str) -> None:
        setattr(self, name, lambda: f"dynamic {name}")

    def use_dynamic_through_self_proxy(self, name: str) -> pykka.Future[str]:
        return getattr(self.actor_ref.proxy(), name)()  # type: ignore[no-any-return]

    def note(self, entry: str) -> None:
        self.trail.append(entry)

    def defer_to_self(self) -> None:
        self.actor_ref.proxy().note.defer("deferred")
        self.trail.append("current")

    def ask_self(self) -> pykka.Future[int]:
        return self.actor_ref.proxy().add(20, 22)  # type: ignore[no-any-return]


class SelfProxying(PooledActor):
    def __init__(self) -> None:
        super().__init__()
        self.self_proxy = self.actor_ref.proxy()
        self.value = "visible"


class PropertyWithSideEffect(PooledActor):
    @property
    def expensive(self) -> NoReturn:
        raise AssertionError("creating a proxy must not evaluate properties")


# -- fixtures and helpers --------------------------------------------------------


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    system = ActorSystem(name=SYSTEM_NAME)
    try:
        with system.activated():
            yield system
    finally:
        system.shutdown(timeout=5.0)


@pytest.fixture
def probe(system: ActorSystem) -> Iterator[Probe]:
    # Depends on ``system`` so that its teardown (releasing any held handler)
    # runs before the system shuts down.
    probe = Probe()
    yield probe
    probe.release.set()


@contextmanager
def parked_timer(system: ActorSystem) -> Iterator[None]:
    """Hold the system's single timer thread in a callback until the block ends.

    No timer can fire meanwhile, so a test can arm and cancel timers without
    racing the clock.
    """
    entered, release = threading.Event(), threading.Event()

    def park() -> None:
        entered.set()
        release.wait(WAIT * 12)  # bounded: a test that forgets to release cannot hang

    system.timer.call_later(0, park)
    assert entered.wait(WAIT)
    try:
        yield
    finally:
        release.set()


def actor_of(ref: ActorRef[Any]) -> Any:
    actor = ref._actor_weakref()
    assert actor is not None
    return actor


def hold(ref: ActorRef[Any], probe: Probe) -> pykka.Future[Any]:
    """Park the actor in a handler until ``probe.release`` is set."""
    future = ref.ask(Hold(), block=False)
    assert probe.entered.wait(WAIT), "the actor never entered the holding handler"
    return future


def dispatcher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(DISPATCH_PREFIX)]


# -- lifecycle hooks ---------------------------------------------------------------


def test_on_start_runs_first_on_a_dispatcher_thread_after_registration(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)
    ref.tell(Note(tag="first"))

    assert ref.ask(Seen(), timeout=WAIT) == ["first"]
    assert probe.entries()[:2] == ["<on_start>", "first"]
    assert probe.threads["on_start"].startswith(DISPATCH_PREFIX)
    assert probe.values["registered_in_on_start"] is True

    assert ref.stop(timeout=WAIT) is True
    assert len(system.registry) == 0


def test_mail_sent_from_init_waits_for_start_and_on_start(
    system: ActorSystem, probe: Probe
) -> None:
    ref = SelfStarter.start(probe)

    assert ref.ask(Seen(), timeout=WAIT) == ["kickoff"]
    assert actor_of(ref).ran_during_init is False, "a handler ran concurrently with __init__"
    assert probe.entries()[:2] == ["<on_start>", "kickoff"]
    assert probe.values["registered_in_on_start"] is True
    ref.stop(timeout=WAIT)
    assert len(system.registry) == 0


def test_on_stop_runs_on_stop_in_the_actors_context(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    assert not probe.stopped.is_set()

    assert ref.stop(timeout=WAIT) is True

    assert probe.stopped.wait(WAIT)
    assert probe.threads["on_stop"].startswith(DISPATCH_PREFIX)
    assert not probe.failed.is_set()
    assert len(system.registry) == 0


def test_failing_tell_calls_on_failure_with_the_exception_and_stops_the_actor(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    ref.tell(Fail(text="tell blew up"))

    assert probe.failed.wait(WAIT)
    assert probe.failure is not None
    exc_type, exc = probe.failure
    assert exc_type is RuntimeError
    assert isinstance(exc, RuntimeError)
    assert str(exc) == "tell blew up"
    assert ref.actor_stopped.wait(WAIT)
    assert not ref.is_alive()
    assert not probe.stopped.is_set(), "on_stop is not called after a failure"
    assert len(system.registry) == 0


def test_failing_ask_returns_the_exception_and_the_actor_keeps_running(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    with pytest.raises(RuntimeError, match="ask blew up"):
        ref.ask(Fail(text="ask blew up"), timeout=WAIT)

    assert ref.is_alive()
    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    assert not probe.failed.is_set()
    assert ref.stop(timeout=WAIT) is True
    assert len(system.registry) == 0


def test_on_start_failure_stops_the_actor_and_answers_waiting_asks(
    system: ActorSystem, probe: Probe
) -> None:
    ref = EarlyFailer.start(probe)
    early = ref.ask("anything", block=False)

    assert probe.started.wait(WAIT)
    assert ref.actor_stopped.wait(WAIT)
    assert not ref.is_alive()
    with pytest.raises(ActorDeadError):
        early.get(timeout=WAIT)
    assert len(system.registry) == 0


def test_on_start_may_stop_the_actor_before_any_message(system: ActorSystem, probe: Probe) -> None:
    ref = EarlyStopper.start(probe)

    assert probe.stopped.wait(WAIT)
    assert ref.actor_stopped.wait(WAIT)
    assert not ref.is_alive()
    assert len(system.registry) == 0


def test_on_stop_failure_still_stops_the_actor(system: ActorSystem, probe: Probe) -> None:
    ref = FailingOnStop.start(probe)

    assert probe.stopped.wait(WAIT)
    assert ref.actor_stopped.wait(WAIT)
    assert not ref.is_alive()
    assert len(system.registry) == 0


def test_stop_of_an_actor_whose_on_stop_raises_reports_success(
    system: ActorSystem, probe: Probe
) -> None:
    ref = RaisingOnStop.start(probe)
    assert ref.ask(Ping(), timeout=WAIT) == "pong"

    assert ref.stop(timeout=WAIT) is True

    assert probe.stopped.is_set()
    assert not ref.is_alive()
    assert len(system.registry) == 0


def test_on_failure_failure_still_stops_the_actor(system: ActorSystem, probe: Probe) -> None:
    ref = FailingOnFailure.start(probe)

    ref.tell(Fail())

    assert probe.failed.wait(WAIT)
    assert ref.actor_stopped.wait(WAIT)
    assert not ref.is_alive()
    assert len(system.registry) == 0


def test_an_actor_may_call_stop_on_itself_twice(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)

    assert ref.ask(StopTwice(), timeout=WAIT) is None

    assert probe.stopped.wait(WAIT)
    assert ref.actor_stopped.wait(WAIT)
    assert probe.entries().count("<on_stop>") == 1
    assert len(system.registry) == 0


def test_mail_sent_before_a_self_stop_is_processed_first(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)

    ref.ask(GreetThenStop(), timeout=WAIT)

    assert probe.stopped.wait(WAIT)
    assert probe.entries() == ["<on_start>", "greetings", "<on_stop>"]
    assert len(system.registry) == 0


# -- stop, tell, ask --------------------------------------------------------------


def test_stop_is_true_the_first_time_and_false_for_a_dead_actor(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    assert ref.is_alive()
    assert ref.stop(timeout=WAIT) is True
    assert not ref.is_alive()
    assert ref.stop(timeout=WAIT) is False
    assert len(system.registry) == 0


def test_non_blocking_stop_returns_a_future_of_the_same_answer(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    first = ref.stop(block=False)
    assert isinstance(first, pykka.Future)
    assert first.get(timeout=WAIT) is True
    assert ref.stop(block=False).get(timeout=WAIT) is False


def test_messages_sent_before_stop_are_processed_and_asks_after_it_fail(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)
    held = hold(ref, probe)
    before = [ref.ask(Note(tag=f"before-{i}"), block=False) for i in range(3)]

    stopping = ref.stop(block=False)
    after = ref.ask(Note(tag="after"), block=False)
    second_stop = ref.stop(block=False)
    probe.release.set()

    assert held.get(timeout=WAIT) == "released"
    assert [f.get(timeout=WAIT) for f in before] == ["before-0", "before-1", "before-2"]
    assert stopping.get(timeout=WAIT) is True
    with pytest.raises(ActorDeadError):
        after.get(timeout=WAIT)
    assert second_stop.get(timeout=WAIT) is True, "a stop queued behind a stop is answered"
    assert "after" not in probe.notes()
    assert len(system.registry) == 0


def test_tell_to_a_dead_actor_raises_actor_dead_error(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    ref.stop(timeout=WAIT)

    with pytest.raises(ActorDeadError) as exc_info:
        ref.tell(Note(tag="too late"))

    assert str(exc_info.value) == f"{ref} not found"


def test_ask_to_a_dead_actor_raises_actor_dead_error(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    ref.stop(timeout=WAIT)

    with pytest.raises(ActorDeadError) as blocking_info:
        ref.ask(Ping(), timeout=WAIT)
    future = ref.ask(Ping(), block=False)
    with pytest.raises(ActorDeadError) as future_info:
        future.get(timeout=WAIT)

    assert str(blocking_info.value) == f"{ref} not found"
    assert str(future_info.value) == f"{ref} not found"


def test_tell_delivers_any_object_to_a_custom_on_receive(system: ActorSystem, probe: Probe) -> None:
    ref = Catcher.start(probe)
    error = Exception("an exception as a message")
    objects: list[Any] = [123, 123.456, {"a": "dict"}, ("a", "tuple"), ["a", "list"], error]

    for obj in objects:
        ref.tell(obj)

    assert ref.ask("ping", timeout=WAIT) == "pong"
    assert probe.received == objects
    ref.stop(timeout=WAIT)


def test_ask_blocks_until_the_answer_arrives(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)

    assert ref.ask(Note(tag="answer"), timeout=WAIT) == "answer"
    ref.stop(timeout=WAIT)


def test_non_blocking_ask_returns_a_future(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    held = hold(ref, probe)

    future = ref.ask(Ping(), block=False)

    assert isinstance(future, pykka.Future)
    assert isinstance(future, PooledFuture)
    with pytest.raises(Timeout):
        future.get(timeout=0)
    probe.release.set()
    assert future.get(timeout=WAIT) == "pong"
    assert held.get(timeout=WAIT) == "released"
    ref.stop(timeout=WAIT)


def test_ask_with_a_timeout_raises_pykka_timeout(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    hold(ref, probe)

    with pytest.raises(Timeout):
        ref.ask(Ping(), timeout=0.05)

    probe.release.set()
    assert ref.ask(Ping(), timeout=WAIT) == "pong", "the actor survives a caller's timeout"
    ref.stop(timeout=WAIT)


def test_messages_from_one_sender_arrive_in_order(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    tags = [f"m{i}" for i in range(300)]

    for tag in tags:
        ref.tell(Note(tag=tag))

    assert ref.ask(Seen(), timeout=WAIT) == tags
    ref.stop(timeout=WAIT)


def test_each_senders_messages_keep_their_order_among_concurrent_senders(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)
    senders, per_sender = 4, 150
    go = threading.Event()

    def send(sender: int) -> None:
        assert go.wait(WAIT)
        for i in range(per_sender):
            ref.tell(Note(tag=f"{sender}:{i}"))

    threads = [threading.Thread(target=send, args=(s,)) for s in range(senders)]
    for thread in threads:
        thread.start()
    go.set()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()

    seen: list[str] = ref.ask(Seen(), block=True, timeout=WAIT)
    assert len(seen) == senders * per_sender
    for sender in range(senders):
        mine = [int(tag.split(":")[1]) for tag in seen if tag.startswith(f"{sender}:")]
        assert mine == list(range(per_sender))
    ref.stop(timeout=WAIT)


# -- identity: urns, refs, threads -------------------------------------------------


def test_actor_urns_are_unique_uuid4_urns(system: ActorSystem, probe: Probe) -> None:
    refs = [Worker.start(probe) for _ in range(5)]

    urns = {ref.actor_urn for ref in refs}
    assert len(urns) == 5
    for urn in urns:
        assert urn.startswith("urn:uuid:")
        assert uuid.UUID(urn).version == 4
    for ref in refs:
        ref.stop(timeout=WAIT)
    assert len(system.registry) == 0


def test_actor_refs_equality_str_and_repr(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    other = Worker.start(probe)
    actor = actor_of(ref)

    assert actor.actor_ref == ref
    assert system.registry.get_by_urn(ref.actor_urn) == ref
    assert ref != other
    found = system.registry.get_by_urn(ref.actor_urn)
    assert found is not None
    assert {ref: "a", other: "b"}[found] == "a"
    assert str(ref) == f"Worker ({ref.actor_urn})"
    assert repr(ref).startswith("<")
    assert repr(ref).endswith(">")
    assert "ActorRef" in repr(ref)
    assert "Worker" in repr(ref)
    assert ref.actor_urn in repr(ref)
    assert ref.actor_class is Worker
    ref.stop(timeout=WAIT)
    other.stop(timeout=WAIT)


def test_an_unstarted_actor_has_an_identity_but_is_not_registered(
    system: ActorSystem, probe: Probe
) -> None:
    unstarted = Worker(probe)

    assert "Worker" in str(unstarted)
    assert unstarted.actor_urn in str(unstarted)
    assert system.registry.get_by_urn(unstarted.actor_urn) is None
    assert not probe.started.is_set()


def test_init_accepts_arbitrary_arguments(system: ActorSystem) -> None:
    actor = PooledActor(1, 2, 3, foo="bar")

    assert actor.actor_urn.startswith("urn:uuid:")


def test_actors_share_the_daemon_dispatcher_threads_instead_of_one_each(
    system: ActorSystem, probe: Probe
) -> None:
    before = threading.active_count()
    refs = [Worker.start(probe) for _ in range(50)]
    names: set[str] = {ref.ask(WhereAmI(), block=True, timeout=WAIT) for ref in refs}

    assert threading.active_count() - before < 5
    assert all(name.startswith(DISPATCH_PREFIX) for name in names)
    threads = dispatcher_threads()
    assert len(threads) == system.dispatcher.thread_count
    assert all(thread.daemon for thread in threads)
    for ref in refs:
        ref.stop(block=False)


def test_many_actors_start_answer_and_stop(system: ActorSystem, probe: Probe) -> None:
    refs = [Worker.start(probe) for _ in range(300)]

    answers = pykka.get_all([ref.ask(Note(tag=str(i)), block=False) for i, ref in enumerate(refs)])
    assert list(answers) == [str(i) for i in range(300)]
    assert len(system.registry) == 300

    stopped = pykka.get_all([ref.stop(block=False) for ref in refs], timeout=WAIT)
    assert all(result is True for result in stopped)
    assert not any(ref.is_alive() for ref in refs)
    assert len(system.registry) == 0


def test_a_busy_actor_yields_its_thread_after_throughput_messages(probe: Probe) -> None:
    fair = ActorSystem(name="fair", dispatcher_threads=1, throughput=8)
    busy_probe = Probe()
    try:
        with fair.activated():
            gate = Worker.start(probe)
            busy = Worker.start(busy_probe)
            observer = Observer.start(busy_probe)
        assert gate.ask(Ping(), timeout=WAIT) == "pong"
        assert busy.ask(Ping(), timeout=WAIT) == "pong"
        assert observer.ask("count", timeout=WAIT) == 0
        # Park the only dispatcher thread, so the run queue fills in a known order.
        held = hold(gate, probe)
        for i in range(100):
            busy.tell(Note(tag=str(i)))
        seen_by_observer = observer.ask("count", block=False)

        probe.release.set()

        assert held.get(timeout=WAIT) == "released"
        # The observer was queued behind the busy actor's first slice only.
        assert 1 <= seen_by_observer.get(timeout=WAIT) <= 8
        assert busy.ask(Seen(), timeout=WAIT) == [str(i) for i in range(100)]
    finally:
        probe.release.set()
        assert fair.shutdown(timeout=WAIT)


def test_an_actor_started_from_a_handler_joins_its_parents_system(
    system: ActorSystem, probe: Probe
) -> None:
    other = ActorSystem(name="other", dispatcher_threads=1)
    try:
        with other.activated():
            parent = Worker.start(probe)

        child: ActorRef[Worker] = parent.ask(Spawn(), block=True, timeout=WAIT)

        assert other.registry.get_by_urn(child.actor_urn) == child
        assert system.registry.get_by_urn(child.actor_urn) is None
        assert child.ask(WhereAmI(), block=True, timeout=WAIT).startswith("other-dispatch-")
    finally:
        assert other.shutdown(timeout=WAIT)


# -- pykka's proxy messages, sent directly -----------------------------------------


def test_pykkas_proxy_messages_work_through_plain_asks(system: ActorSystem, probe: Probe) -> None:
    ref = Gadget.start(probe)

    assert ref.ask(ProxyCall(attr_path=("add",), args=(1, 2), kwargs={}), timeout=WAIT) == 3
    assert ref.ask(ProxyGetAttr(attr_path=("label",)), timeout=WAIT) == "gadget"
    ref.ask(ProxySetAttr(attr_path=("count",), value=9), timeout=WAIT)
    assert ref.ask(ProxyGetAttr(attr_path=("count",)), timeout=WAIT) == 9
    ref.ask(ProxySetAttr(attr_path=("shallow", "name"), value="renamed"), timeout=WAIT)
    assert ref.ask(ProxyGetAttr(attr_path=("shallow", "name")), timeout=WAIT) == "renamed"
    ref.stop(timeout=WAIT)


# -- proxies -------------------------------------------------------------------------


@pytest.fixture
def gadget(system: ActorSystem, probe: Probe) -> Iterator[ActorProxy[Gadget]]:
    proxy = Gadget.start(probe).proxy()
    yield proxy
    proxy.actor_ref.stop(timeout=WAIT)


def test_proxy_reads_attributes_and_properties(gadget: ActorProxy[Gadget]) -> None:
    assert gadget.label.get(timeout=WAIT) == "gadget"
    assert gadget.count.get(timeout=WAIT) == 0
    assert gadget.read_only.get(timeout=WAIT) == "read only"
    assert gadget.read_write.get(timeout=WAIT) == "initial"


def test_proxy_sets_attributes_and_writable_properties(gadget: ActorProxy[Gadget]) -> None:
    gadget.count = 5
    gadget.read_write = "changed"

    assert gadget.count.get(timeout=WAIT) == 5
    assert gadget.read_write.get(timeout=WAIT) == "changed"
    with pytest.raises(AttributeError):
        gadget.read_only = "nope"


def test_proxy_hides_private_and_missing_attributes(gadget: ActorProxy[Gadget]) -> None:
    with pytest.raises(AttributeError, match="has no attribute '_secret'"):
        gadget._secret.get(timeout=WAIT)
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        gadget.missing.get(timeout=WAIT)


def test_creating_a_proxy_evaluates_no_property(system: ActorSystem) -> None:
    ref = PropertyWithSideEffect.start()

    proxy = ref.proxy()

    assert isinstance(proxy, ActorProxy)
    ref.stop(timeout=WAIT)


def test_proxy_method_call_returns_a_future_and_runs_in_the_actor(
    gadget: ActorProxy[Gadget],
) -> None:
    future = gadget.add(2, 3)

    assert isinstance(future, pykka.Future)
    assert future.get(timeout=WAIT) == 5
    assert gadget.where().get(timeout=WAIT).startswith(DISPATCH_PREFIX)


def test_proxy_side_effects_are_observable(gadget: ActorProxy[Gadget]) -> None:
    assert gadget.bump().get(timeout=WAIT) is None
    assert gadget.count.get(timeout=WAIT) == 1


def test_proxy_method_exception_is_raised_by_the_future_only(
    gadget: ActorProxy[Gadget], probe: Probe
) -> None:
    future = gadget.explode()

    with pytest.raises(ValueError, match="exploded"):
        future.get(timeout=WAIT)
    assert gadget.actor_ref.is_alive()
    assert gadget.add(1, 1).get(timeout=WAIT) == 2
    assert not probe.failed.is_set()


def test_deferred_call_returns_nothing_and_has_its_effect(gadget: ActorProxy[Gadget]) -> None:
    assert gadget.bump.defer() is None
    gadget.bump.defer()

    assert gadget.count.get(timeout=WAIT) == 2


def test_deferred_call_that_raises_calls_on_failure(
    gadget: ActorProxy[Gadget], probe: Probe
) -> None:
    assert gadget.explode.defer() is None

    assert probe.failed.wait(WAIT)
    assert gadget.actor_ref.actor_stopped.wait(WAIT)
    assert not probe.stopped.is_set()


def test_method_accessed_without_calling_is_a_callable_proxy(gadget: ActorProxy[Gadget]) -> None:
    method = gadget.add

    assert isinstance(method, CallableProxy)
    assert method(4, 5).get(timeout=WAIT) == 9


def test_unknown_method_raises_attribute_error(gadget: ActorProxy[Gadget]) -> None:
    with pytest.raises(AttributeError) as call_info:
        gadget.unknown_method()
    with pytest.raises(AttributeError) as defer_info:
        gadget.unknown_method.defer()

    for info in (call_info, defer_info):
        assert str(info.value).startswith("<ActorProxy for Gadget")
        assert str(info.value).endswith("has no attribute 'unknown_method'")


def test_traversable_attributes_expose_nested_attributes_and_methods(
    gadget: ActorProxy[Gadget],
) -> None:
    assert gadget.shallow.name.get(timeout=WAIT) == "shallow"
    assert gadget.shallow.twice(21).get(timeout=WAIT) == 42
    assert gadget.shallow.deeper.name.get(timeout=WAIT) == "deeper"
    assert gadget.shallow.deeper.shout("hi").get(timeout=WAIT) == "HI!"
    assert gadget.marked.inner.get(timeout=WAIT) == "opaque inner"

    gadget.shallow.deeper.name = "renamed"
    assert gadget.shallow.deeper.name.get(timeout=WAIT) == "renamed"


def test_unmarked_attributes_and_property_results_are_not_traversed(
    gadget: ActorProxy[Gadget],
) -> None:
    with pytest.raises(AttributeError):
        gadget.opaque.inner.get(timeout=WAIT)
    assert gadget.opaque.get(timeout=WAIT).inner == "opaque inner"
    assert gadget.shallow_copy.get(timeout=WAIT).name == "shallow"


def test_proxy_equality_hash_repr_str_and_dir(gadget: ActorProxy[Gadget]) -> None:
    again = gadget.actor_ref.proxy()
    urn = gadget.actor_ref.actor_urn

    assert gadget == again
    assert hash(gadget) == hash(again)
    assert gadget != gadget.shallow
    assert repr(gadget).startswith("<ActorProxy for Gadget")
    assert repr(gadget).endswith(">")
    assert urn in repr(gadget)
    assert "shallow" in repr(gadget.shallow)
    assert urn in str(gadget)
    listing = dir(gadget)
    for name in ("label", "count", "add", "shallow", "read_only", "__getattr__"):
        assert name in listing


def test_static_and_class_methods_through_a_proxy(gadget: ActorProxy[Gadget]) -> None:
    assert gadget.double(21).get(timeout=WAIT) == 42
    # As with ThreadingActor, a classmethod is read through the proxy as an
    # attribute (a future of the bound method), not called in the actor.
    assert gadget.kind.get(timeout=WAIT)() == "Gadget"


def test_methods_added_at_runtime_are_callable_through_the_proxy(
    gadget: ActorProxy[Gadget],
) -> None:
    gadget.add_method("fresh").get(timeout=WAIT)

    assert gadget.fresh().get(timeout=WAIT) == "dynamic fresh"


def test_actor_can_use_a_proxy_to_itself_for_methods_added_earlier(
    gadget: ActorProxy[Gadget],
) -> None:
    gadget.add_method("later")  # no get(): FIFO puts it before the next call

    inner = gadget.use_dynamic_through_self_proxy("later").get(timeout=WAIT)

    assert inner.get(timeout=WAIT) == "dynamic later"


def test_calls_to_self_through_a_proxy_run_after_the_current_message(
    gadget: ActorProxy[Gadget],
) -> None:
    gadget.defer_to_self().get(timeout=WAIT)

    assert gadget.trail.get(timeout=WAIT) == ["current", "deferred"]
    inner = gadget.ask_self().get(timeout=WAIT)
    assert inner.get(timeout=WAIT) == 42


def test_a_proxy_to_self_is_not_exposed(system: ActorSystem) -> None:
    ref = SelfProxying.start()
    proxy = ref.proxy()

    assert proxy.value.get(timeout=WAIT) == "visible"
    with pytest.raises(AttributeError, match="has no attribute 'self_proxy'"):
        proxy.self_proxy  # noqa: B018
    ref.stop(timeout=WAIT)


def test_proxy_of_a_dead_actor_raises_actor_dead_error(system: ActorSystem, probe: Probe) -> None:
    ref = Gadget.start(probe)
    early = ref.proxy()
    ref.stop(timeout=WAIT)

    with pytest.raises(ActorDeadError) as exc_info:
        ref.proxy()
    assert str(exc_info.value) == f"{ref} not found"
    with pytest.raises(ActorDeadError):
        early.add(1, 2).get(timeout=WAIT)
    with pytest.raises(ActorDeadError):
        early.bump.defer()
    with pytest.raises(ActorDeadError):
        early.count = 3
    assert not early.actor_ref.is_alive()


# -- futures ---------------------------------------------------------------------------


def test_future_get_with_timeout_raises_timeout_while_unset() -> None:
    future: PooledFuture[int] = PooledFuture()

    with pytest.raises(Timeout):
        future.get(timeout=0.01)
    future.set(7)
    assert future.get(timeout=0) == 7
    assert future.get() == 7, "the value can be read again"


def test_future_set_exception_is_raised_by_get_with_its_traceback() -> None:
    future: PooledFuture[int] = PooledFuture()

    def raise_it() -> NoReturn:
        raise NameError("not defined")

    try:
        raise_it()
    except NameError:
        _, raised, raised_tb = sys.exc_info()
        future.set_exception()

    with pytest.raises(NameError) as exc_info:
        future.get(timeout=0)
    assert exc_info.value is raised
    raised_frames = [frame.name for frame in traceback.extract_tb(raised_tb)]
    got_frames = [frame.name for frame in traceback.extract_tb(exc_info.tb)]
    assert "raise_it" in raised_frames
    assert "raise_it" in got_frames

    explicit: PooledFuture[int] = PooledFuture()
    explicit.set_exception((KeyError, KeyError("k"), None))
    with pytest.raises(KeyError):
        explicit.get(timeout=0)


def test_future_can_be_set_only_once() -> None:
    future: PooledFuture[int] = PooledFuture()
    future.set(1)

    with pytest.raises(Exception):
        future.set(2)
    with pytest.raises(Exception):
        future.set_exception((ValueError, ValueError("late"), None))
    with pytest.raises(Exception):
        future.set_get_hook(lambda _timeout: 3)
    assert future.get(timeout=0) == 1
    assert future.try_set(4) is False


def test_future_get_hook_supplies_the_value_once() -> None:
    calls: list[float | None] = []
    future: PooledFuture[str] = PooledFuture()

    def hook(timeout: float | None) -> str:
        calls.append(timeout)
        return f"hooked {timeout}"

    future.set_get_hook(hook)

    assert future.get(timeout=1.5) == "hooked 1.5"
    assert future.get(timeout=2.5) == "hooked 1.5"
    assert calls == [1.5]
    with pytest.raises(Exception):
        future.set("too late")


def test_future_holding_a_future() -> None:
    inner: PooledFuture[str] = PooledFuture()
    inner.set("inside")
    outer: PooledFuture[PooledFuture[str]] = PooledFuture()
    outer.set(inner)

    assert outer.get(timeout=0).get(timeout=0) == "inside"


def test_future_map_applies_the_function_once() -> None:
    calls: list[int] = []
    future: PooledFuture[int] = PooledFuture()

    def plus_ten(value: int) -> int:
        calls.append(value)
        return value + 10

    mapped = future.map(plus_ten)
    with pytest.raises(Timeout):
        mapped.get(timeout=0)
    future.set(30)

    assert mapped.get(timeout=0) == 40
    assert mapped.get(timeout=0) == 40
    assert calls == [30]

    mapping: PooledFuture[Any] = PooledFuture()
    key = mapping.map(lambda value: value["foo"])
    mapping.set({"foo": "bar"})
    assert key.get(timeout=0) == "bar"

    sequence: PooledFuture[Any] = PooledFuture()
    whole = sequence.map(lambda value: value + 10)  # the whole list, not each item
    sequence.set([10, 20, 30])
    with pytest.raises(TypeError):
        whole.get(timeout=0)


def test_future_filter_keeps_matching_items() -> None:
    future: PooledFuture[Any] = PooledFuture()
    filtered = future.filter(lambda x: x > 10)
    with pytest.raises(Timeout):
        filtered.get(timeout=0)
    future.set([1, 5, 11, 15, 9, 20])

    assert filtered.get(timeout=0) == [11, 15, 20]

    scalar: PooledFuture[Any] = PooledFuture()
    bad = scalar.filter(lambda x: x > 10)
    scalar.set(1)
    with pytest.raises(TypeError):
        bad.get(timeout=0)


def test_future_reduce_folds_from_the_left() -> None:
    future: PooledFuture[Any] = PooledFuture()
    reduced = future.reduce(lambda acc, item: acc + item)
    seeded = future.reduce(lambda acc, item: acc + item, ">")
    with pytest.raises(Timeout):
        reduced.get(timeout=0)
    future.set(["a", "b", "c"])

    assert reduced.get(timeout=0) == "abc"
    assert seeded.get(timeout=0) == ">abc"

    empty: PooledFuture[Any] = PooledFuture()
    initial_only = empty.reduce(lambda acc, item: acc + item, 5)
    empty.set([])
    assert initial_only.get(timeout=0) == 5


def test_future_join_and_get_all_collect_results_in_order() -> None:
    futures: list[PooledFuture[int]] = [PooledFuture() for _ in range(3)]
    joined = futures[0].join(futures[1], futures[2])
    futures[2].set(2)
    futures[0].set(0)

    with pytest.raises(Timeout):
        joined.get(timeout=0)
    with pytest.raises(Timeout):
        pykka.get_all(futures, timeout=0)

    futures[1].set(1)
    assert joined.get(timeout=0) == [0, 1, 2]
    assert pykka.get_all(futures) == [0, 1, 2]
    assert pykka.get_all(futures) == [0, 1, 2]


def test_future_combinators_on_actor_answers(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    first = ref.ask(Note(tag="a"), block=False)
    second = ref.ask(Note(tag="bb"), block=False)

    assert first.map(str.upper).get(timeout=WAIT) == "A"
    assert first.join(second).get(timeout=WAIT) == ["a", "bb"]
    joined = first.join(second)
    assert joined.map("".join).get(timeout=WAIT) == "abb"
    assert joined.filter(lambda tag: len(tag) > 1).get(timeout=WAIT) == ["bb"]
    assert joined.reduce(lambda acc, tag: acc + len(tag), 0).get(timeout=WAIT) == 3
    assert pykka.get_all([first, second], timeout=WAIT) == ["a", "bb"]
    ref.stop(timeout=WAIT)


def test_futures_can_be_awaited_in_asyncio(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    proxy = Gadget.start(probe).proxy()
    ready: PooledFuture[int] = PooledFuture()
    ready.set(1)

    async def main() -> tuple[Any, ...]:
        plain = await ready
        answer = await ref.ask(Note(tag="awaited"), block=False)
        summed = await proxy.add(40, 2)
        try:
            await ref.ask(Fail(text="awaited failure"), block=False)
        except RuntimeError as error:
            failure = str(error)
        return plain, answer, summed, failure

    assert asyncio.run(asyncio.wait_for(main(), WAIT)) == (1, "awaited", 42, "awaited failure")

    @types.coroutine
    def yield_from() -> Generator[None, None, int]:
        value = yield from ready
        return value

    async def via_yield_from() -> int:
        return await yield_from()

    assert asyncio.run(via_yield_from()) == 1
    ref.stop(timeout=WAIT)
    proxy.actor_ref.stop(timeout=WAIT)


def test_done_callbacks_run_once_when_set_or_at_once_when_already_done() -> None:
    seen: list[Any] = []
    future: PooledFuture[int] = PooledFuture()
    future.add_done_callback(lambda f: seen.append(f.get(timeout=0)))
    assert seen == []

    future.set(5)
    future.add_done_callback(lambda f: seen.append(("late", f.get(timeout=0))))

    assert seen == [5, ("late", 5)]
    assert future.done()


# -- Fore: BaseException fails one actor only ----------------------------------------


@pytest.mark.parametrize(
    ("how", "expected"), [("exit", SystemExit), ("interrupt", KeyboardInterrupt)]
)
def test_base_exception_in_an_ask_crashes_only_that_actor(
    system: ActorSystem, probe: Probe, how: Literal["exit", "interrupt"], expected: type
) -> None:
    victim_probe = Probe()
    victim = Worker.start(victim_probe)
    bystander = Worker.start(probe)
    assert victim.ask(Ping(), timeout=WAIT) == "pong"

    with pytest.raises(ActorCrashed) as exc_info:
        victim.ask(Die(how=how), timeout=WAIT)

    assert not isinstance(exc_info.value, expected)
    assert isinstance(exc_info.value.__cause__, expected)
    assert victim_probe.failed.wait(WAIT)
    assert victim_probe.failure is not None
    assert victim_probe.failure[0] is expected
    assert not victim.is_alive()
    assert bystander.is_alive()
    assert bystander.ask(Ping(), timeout=WAIT) == "pong"
    assert len(dispatcher_threads()) == system.dispatcher.thread_count
    assert system.registry.get_all() == [bystander]
    bystander.stop(timeout=WAIT)
    assert len(system.registry) == 0


@pytest.mark.parametrize("how", ["exit", "interrupt"])
def test_base_exception_in_a_tell_crashes_only_that_actor(
    system: ActorSystem, probe: Probe, how: Literal["exit", "interrupt"]
) -> None:
    victim_probe = Probe()
    victim = Worker.start(victim_probe)
    bystanders = [Worker.start(probe) for _ in range(3)]
    actor_of(victim).add_exit_watcher(victim_probe.on_exit)
    hold(victim, victim_probe)

    victim.tell(Die(how=how))
    queued = victim.ask(Ping(), block=False)
    victim_probe.release.set()

    assert victim_probe.exited.wait(WAIT)
    assert victim_probe.exits[0].failed is True
    assert isinstance(victim_probe.exits[0].error, SystemExit | KeyboardInterrupt)
    with pytest.raises(ActorDeadError):
        queued.get(timeout=WAIT)
    assert not victim.is_alive()
    assert not probe.stopped.is_set()
    assert [ref.ask(Ping(), timeout=WAIT) for ref in bystanders] == ["pong"] * 3
    later = Worker.start(Probe())
    assert later.ask(Ping(), timeout=WAIT) == "pong", "new actors still start and run"
    for ref in [*bystanders, later]:
        ref.stop(timeout=WAIT)
    assert len(system.registry) == 0


@pytest.mark.parametrize("trigger", ["tell raising Exception", "ask raising SystemExit"])
def test_base_exception_from_on_failure_still_ends_the_actor_cleanly(
    system: ActorSystem, probe: Probe, trigger: str
) -> None:
    # The hook runs in the actor's context like a handler: a BaseException it
    # raises must not escape the actor either. The actor still exits (watchers
    # told), the crashing ask gets ActorCrashed and the queued ask ActorDeadError.
    victim = PanickyOnFailure.start(probe)
    bystander = Worker.start(Probe())
    actor_of(victim).add_exit_watcher(probe.on_exit)
    hold(victim, probe)
    crashing: pykka.Future[Any] | None = None
    if trigger == "tell raising Exception":
        victim.tell(Fail())
    else:
        crashing = victim.ask(Die(how="exit"), block=False)
    queued = victim.ask(Ping(), block=False)

    probe.release.set()

    assert probe.failed.wait(WAIT), "on_failure was called"
    assert probe.exited.wait(WAIT), "exit watchers must be told"
    assert probe.exits[0].failed is True
    if crashing is not None:
        with pytest.raises(ActorCrashed):
            crashing.get(timeout=WAIT)
    with pytest.raises(ActorDeadError):
        queued.get(timeout=WAIT)
    assert not victim.is_alive()
    assert bystander.ask(Ping(), timeout=WAIT) == "pong"
    bystander.stop(timeout=WAIT)
    assert len(system.registry) == 0


# -- Fore: control lane, stop_now, kill ------------------------------------------------


def test_control_messages_overtake_queued_ordinary_mail(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    held = hold(ref, probe)
    for i in range(10):
        ref.tell(Note(tag=f"n{i}"))
    ref.tell(Urgent(tag="u1"))
    ref.tell(Urgent(tag="u2"))

    probe.release.set()

    assert held.get(timeout=WAIT) == "released"
    assert ref.ask(Seen(), timeout=WAIT) == ["u1", "u2"] + [f"n{i}" for i in range(10)]
    ref.stop(timeout=WAIT)


def test_stop_now_stops_ahead_of_queued_mail(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    held = hold(ref, probe)
    for i in range(5):
        ref.tell(Note(tag=f"queued-{i}"))
    queued_asks = [ref.ask(Note(tag=f"asked-{i}"), block=False) for i in range(3)]

    assert stop_now(ref, block=False) is True
    probe.release.set()

    assert held.get(timeout=WAIT) == "released"
    assert probe.stopped.wait(WAIT)
    for future in queued_asks:
        with pytest.raises(ActorDeadError):
            future.get(timeout=WAIT)
    assert probe.notes() == []
    assert not ref.is_alive()
    assert stop_now(ref) is False
    assert ref.stop(timeout=WAIT) is False
    assert len(system.registry) == 0


def test_blocking_stop_now_on_an_idle_actor(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)

    assert stop_now(ref, timeout=WAIT) is True
    assert probe.stopped.is_set()
    assert stop_now(ref, timeout=WAIT) is False
    assert len(system.registry) == 0


def test_kill_answers_queued_asks_with_actor_dead_error(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    actor = actor_of(ref)
    actor.add_exit_watcher(probe.on_exit)
    held = hold(ref, probe)
    queued = [ref.ask(Ping(), block=False) for _ in range(3)]

    actor.kill()

    for future in queued:
        with pytest.raises(ActorDeadError):
            future.get(timeout=WAIT)
    assert not ref.is_alive()
    assert system.registry.get_by_urn(ref.actor_urn) is None
    assert probe.exited.wait(WAIT)
    assert probe.exits[0].killed is True
    with pytest.raises(ActorDeadError):
        ref.tell(Ping())
    probe.release.set()
    assert held.get(timeout=WAIT) == "released", "the running handler finishes its reply"
    assert not probe.stopped.is_set(), "kill skips on_stop"


# -- Fore: ask deadlines ----------------------------------------------------------------


def test_asks_without_timeout_get_the_class_default_deadline(
    system: ActorSystem, probe: Probe
) -> None:
    ref = ImpatientWorker.start(probe)
    pending = ref.ask(Hold(), block=False)
    assert probe.entered.wait(WAIT)

    with pytest.raises(AskTimeout) as exc_info:
        ref.ask(Ping())
    assert isinstance(exc_info.value, Timeout)
    with pytest.raises(AskTimeout):
        pending.get()

    probe.release.set()
    assert pending.get(timeout=WAIT) == "released", "an explicit timeout outlives the deadline"
    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    ref.stop(timeout=WAIT)


def test_default_deadline_is_sixty_seconds(system: ActorSystem, probe: Probe) -> None:
    assert PooledActor.default_ask_timeout == 60.0
    ref = Worker.start(probe)

    future = ref.ask(Ping(), block=False)

    assert isinstance(future, PooledFuture)
    assert future.deadline is not None
    assert future.get(timeout=WAIT) == "pong"
    ref.stop(timeout=WAIT)


def test_deferred_reply_that_never_comes_still_times_out(system: ActorSystem, probe: Probe) -> None:
    ref = ImpatientWorker.start(probe)

    with pytest.raises(AskTimeout):
        ref.ask(Later())
    assert ref.is_alive()
    ref.stop(timeout=WAIT)


# -- Fore: typed dispatch -----------------------------------------------------------------


def test_unknown_typed_message_is_rejected_for_asks_and_ignored_for_tells(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    with pytest.raises(UnhandledMessageError):
        ref.ask(Unknown(), timeout=WAIT)
    ref.tell(Unknown())

    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    assert ref.is_alive()
    assert not probe.failed.is_set()
    ref.stop(timeout=WAIT)


class Lenient(PooledActor):
    """A pykka-style actor: not strict, so unknown asks are answered ``None``."""

    @handles(Ping)
    def _ping(self, message: Ping) -> str:
        return "pong"


def test_an_unknown_ask_is_answered_none_and_logged_as_pykka_does_unless_strict(
    system: ActorSystem, caplog: pytest.LogCaptureFixture
) -> None:
    ref = Lenient.start()

    with caplog.at_level(logging.WARNING, logger="pykka"):
        assert ref.ask(Unknown(), timeout=WAIT) is None
    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    mine = [
        r
        for r in caplog.records
        if r.name == "pykka" and r.levelno >= logging.WARNING and str(ref) in r.getMessage()
    ]
    (record,) = mine  # other actors of the suite may log on "pykka" meanwhile
    assert record.getMessage().startswith(f"Unexpected message received by {ref}")
    assert ref.is_alive()
    ref.stop(timeout=WAIT)


def test_pooled_actors_are_visible_to_pykkas_registry_and_its_stop_all(system: ActorSystem) -> None:
    refs = [Lenient.start() for _ in range(3)]

    for ref in refs:
        assert ref in pykka.ActorRegistry.get_all()
        assert pykka.ActorRegistry.get_by_urn(ref.actor_urn) is ref
    assert set(pykka.ActorRegistry.get_by_class(Lenient)) == set(refs)

    pykka.ActorRegistry.stop_all(timeout=WAIT)  # pykka's usual shutdown reaches them

    for ref in refs:
        assert not ref.is_alive()
        assert ref not in pykka.ActorRegistry.get_all()
        assert system.registry.get_by_urn(ref.actor_urn) is None


def test_handles_dispatches_on_the_nearest_type_in_the_mro(system: ActorSystem) -> None:
    zoo = Zoo.start()
    puppies = PuppyZoo.start()

    assert zoo.ask(Animal(), timeout=WAIT) == "animal"
    assert zoo.ask(Dog(), timeout=WAIT) == "dog"
    assert zoo.ask(Puppy(), timeout=WAIT) == "dog"
    assert zoo.ask(Cat(), timeout=WAIT) == "animal"
    assert zoo.ask(Fish(), timeout=WAIT) == "small Fish"
    assert zoo.ask(Bird(), timeout=WAIT) == "small Bird"
    # A subclass actor adds a more specific handler and inherits the rest,
    # without changing its parent's table.
    assert puppies.ask(Puppy(), timeout=WAIT) == "puppy"
    assert puppies.ask(Dog(), timeout=WAIT) == "dog"
    assert puppies.ask(Cat(), timeout=WAIT) == "animal"
    assert zoo.ask(Puppy(), timeout=WAIT) == "dog"
    with pytest.raises(UnhandledMessageError):
        zoo.ask(Ping(), timeout=WAIT)
    zoo.stop(timeout=WAIT)
    puppies.stop(timeout=WAIT)


def test_invalid_messages_are_rejected_at_the_sender(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)

    with pytest.raises(ValidationError) as bad_type:
        Answer(value="not a number")
    with pytest.raises(ValidationError) as extra:
        Note(tag="ok", colour="red")  # type: ignore[call-arg]
    with pytest.raises(ValidationError) as missing:
        Note()  # type: ignore[call-arg]
    note = Note(tag="frozen")
    with pytest.raises(ValidationError) as frozen:
        note.tag = "changed"  # type: ignore[misc]

    assert bad_type.value.errors()[0]["loc"] == ("value",)
    assert extra.value.errors()[0]["loc"] == ("colour",)
    assert extra.value.errors()[0]["type"] == "extra_forbidden"
    assert missing.value.errors()[0]["loc"] == ("tag",)
    assert frozen.value.errors()[0]["type"] == "frozen_instance"
    assert ref.ask(Seen(), timeout=WAIT) == []
    ref.stop(timeout=WAIT)


# -- Fore: non-blocking helpers -----------------------------------------------------------


def test_run_blocking_delivers_the_result_in_the_actors_context(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    ref.tell(Offload())

    assert probe.done.wait(WAIT)
    assert probe.values["result"] == 42
    assert probe.threads["work"].startswith(BLOCKING_PREFIX)
    assert probe.threads["then"].startswith(DISPATCH_PREFIX)
    ref.stop(timeout=WAIT)


def test_run_blocking_error_goes_to_on_error_in_the_actors_context(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    ref.tell(Offload(fail=True))

    assert probe.done.wait(WAIT)
    error = probe.values["error"]
    assert isinstance(error, ValueError)
    assert str(error) == "blocking work failed"
    assert probe.threads["work"].startswith(BLOCKING_PREFIX)
    assert probe.threads["on_error"].startswith(DISPATCH_PREFIX)
    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    assert not probe.failed.is_set()
    ref.stop(timeout=WAIT)


def test_run_blocking_error_without_on_error_fails_the_actor(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    ref.tell(Offload(fail=True, with_on_error=False))

    assert probe.failed.wait(WAIT)
    assert probe.failure is not None
    assert isinstance(probe.failure[1], ValueError)
    assert ref.actor_stopped.wait(WAIT)
    assert len(system.registry) == 0


def test_ask_then_delivers_the_answer_in_the_askers_context(
    system: ActorSystem, probe: Probe
) -> None:
    peer = Worker.start(Probe())
    asker = Worker.start(probe, peer)

    asker.tell(Relay())

    assert probe.done.wait(WAIT)
    assert probe.values["answer"] == "pong"
    assert probe.threads["then"].startswith(DISPATCH_PREFIX)
    asker.stop(timeout=WAIT)
    peer.stop(timeout=WAIT)


def test_ask_then_delivers_the_peers_error_to_on_error(system: ActorSystem, probe: Probe) -> None:
    peer = Worker.start(Probe())
    asker = Worker.start(probe, peer)

    asker.tell(Relay(fail=True))

    assert probe.done.wait(WAIT)
    error = probe.values["error"]
    assert isinstance(error, RuntimeError)
    assert str(error) == "peer failed"
    assert probe.threads["on_error"].startswith(DISPATCH_PREFIX)
    assert asker.ask(Ping(), timeout=WAIT) == "pong"
    assert peer.ask(Ping(), timeout=WAIT) == "pong"
    asker.stop(timeout=WAIT)
    peer.stop(timeout=WAIT)


def test_send_after_delivers_and_a_cancelled_timer_never_does(
    system: ActorSystem, probe: Probe
) -> None:
    ref = Worker.start(probe)

    # Park the timer thread first, so the cancel lands before the timer could
    # possibly fire however slowly this thread or the dispatcher runs.
    with parked_timer(system):
        ref.ask(Arm(delay=0.01, tag="cancelled", cancel=True), timeout=WAIT)
        ref.ask(Arm(delay=0.05, tag="fired"), timeout=WAIT)
        assert system.timer.pending() == 1, "the cancelled timer is no longer pending"

    # Timers fire in deadline order and the mailbox is FIFO, so once the later
    # timer's message has arrived, the cancelled one would have arrived too.
    assert probe.wait_for("fired")
    assert probe.notes() == ["fired"]
    ref.stop(timeout=WAIT)


def test_call_after_runs_in_the_actors_context(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)

    ref.tell(CallLater(delay=0.01, tag="called"))

    assert probe.wait_for("called")
    assert probe.threads["call_after"].startswith(DISPATCH_PREFIX)
    ref.stop(timeout=WAIT)


def test_defer_reply_lets_a_handler_answer_later(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)

    future = ref.ask(Later(), block=False)
    assert probe.done.wait(WAIT)
    with pytest.raises(Timeout):
        future.get(timeout=0.01)
    ref.tell(Answer(value=7))

    assert future.get(timeout=WAIT) == 7
    assert probe.values["deferred_was_none"] is False
    ref.stop(timeout=WAIT)


def test_defer_reply_in_a_tell_returns_none(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)

    ref.tell(Later())

    assert probe.done.wait(WAIT)
    assert probe.values["deferred_was_none"] is True
    ref.stop(timeout=WAIT)


# -- Fore: exit watchers and the registry ---------------------------------------------------


def test_exit_watcher_sees_a_crash_as_failed(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    actor = actor_of(ref)
    assert actor.add_exit_watcher(probe.on_exit) is True

    ref.tell(Fail(text="watched crash"))

    assert probe.exited.wait(WAIT)
    record = probe.exits[0]
    assert record.failed is True
    assert record.killed is False
    assert record.ref == ref
    assert isinstance(record.error, RuntimeError)
    assert str(record.error) == "watched crash"
    assert actor.add_exit_watcher(probe.on_exit) is False, "too late to watch"
    assert len(probe.exits) == 1


def test_exit_watcher_sees_a_stop_as_not_failed(system: ActorSystem, probe: Probe) -> None:
    ref = Worker.start(probe)
    actor_of(ref).add_exit_watcher(probe.on_exit)

    assert ref.stop(timeout=WAIT) is True

    assert probe.exited.wait(WAIT)
    record = probe.exits[0]
    assert record.failed is False
    assert record.killed is False
    assert record.error is None


def test_registry_finds_actors_by_urn_session_and_name(system: ActorSystem, probe: Probe) -> None:
    alpha = [SessionWorker.start(probe, "alpha") for _ in range(3)]
    beta = SessionWorker.start(probe, "beta")
    named = NamedWorker.start(probe)
    registry = actor_of(beta).system.registry

    assert registry is system.registry
    assert pykka.ActorRegistry.get_by_urn(beta.actor_urn) is beta, "visible to pykka too"
    assert registry.get_by_urn(beta.actor_urn) == beta
    assert set(registry.get_by_session("alpha")) == set(alpha)
    assert registry.get_by_session("beta") == [beta]
    assert sorted(registry.sessions()) == ["alpha", "beta"]
    assert registry.get_by_name("the-singleton") == named
    with pytest.raises(ValueError, match="already registered"):
        NamedWorker.start(probe)

    alpha[0].stop(timeout=WAIT)
    beta.stop(timeout=WAIT)

    assert registry.get_by_urn(alpha[0].actor_urn) is None
    assert set(registry.get_by_session("alpha")) == set(alpha[1:])
    assert registry.get_by_session("beta") == []
    assert registry.sessions() == ["alpha"]

    remaining: list[ActorRef[Any]] = [*alpha[1:], named]
    for other in remaining:
        other.stop(timeout=WAIT)
    assert registry.get_by_name("the-singleton") is None
    assert registry.sessions() == []
    assert len(registry) == 0


def test_registry_forgets_failed_actors(system: ActorSystem, probe: Probe) -> None:
    ref = SessionWorker.start(probe, "crashy")
    assert system.registry.get_by_session("crashy") == [ref]

    ref.tell(Fail())

    assert probe.failed.wait(WAIT)
    assert ref.actor_stopped.wait(WAIT)
    assert system.registry.get_by_urn(ref.actor_urn) is None
    assert system.registry.get_by_session("crashy") == []


def test_system_shutdown_stops_every_remaining_actor(probe: Probe) -> None:
    own = ActorSystem(name="own", dispatcher_threads=2)
    with own.activated():
        refs = [Worker.start(probe) for _ in range(5)]
    assert all(ref.ask(Ping(), timeout=WAIT) == "pong" for ref in refs)

    assert own.shutdown(timeout=WAIT) is True

    assert not any(ref.is_alive() for ref in refs)
    assert len(own.registry) == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("own-dispatch-")]
