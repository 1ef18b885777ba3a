"""The root of every exception Fore raises, and every public exception under it.

``except fore.ForeError`` catches everything Fore raises on purpose, and none
of an application's own bugs. Each exception also keeps the builtin base that
says what kind of failure it is (``BlobNotFound`` is a ``LookupError``,
``PathOutOfScope`` a ``ValueError``, ``AskTimeout`` a ``pykka.Timeout``,
``ActorStopped`` a ``pykka.ActorDeadError``), so an
``except`` written against the builtin keeps working. They are all defined
here, in one module (as httpx's ``_exceptions.py`` does), so that the whole
family can be read in one place and no two of them can share a name; the
modules that raise them import them from here (and still re-export them, so
``from fore.actors.tools.base import ToolError`` keeps working).

The tree (``+X``: also a subclass of the builtin ``X``; the comment names
the package that raises it)::

    ForeError
    │   # the actor system (fore.actors.core) and supervision (fore.supervision)
    ├── AskTimeout (+pykka.Timeout)
    ├── ActorCrashed
    ├── ActorStopped (+pykka.ActorDeadError)
    ├── UnhandledMessageError
    ├── BlockingOnDispatcherError (+RuntimeError)
    ├── ActorSystemClosed (+RuntimeError)
    ├── Cancelled
    ├── SupervisorIntensityError (+RuntimeError)
    ├── ChildRejectedError (+TypeError)
    │   # tools (fore.actors.tools, fore.actors.resolve)
    ├── ToolError
    │   ├── StalePreview
    │   └── PreviewApplyFailed
    ├── ToolCancelled
    ├── ToolDefinitionError (+TypeError)
    ├── ToolLoopClosed (+RuntimeError)
    ├── RunnerSaturated (+RuntimeError)
    ├── TrackingUnavailable (+RuntimeError)
    ├── PatternError (+ValueError)
    │   # files: the workspace and the speculation overlay (fore.actors.tools, fore.actors.overlay)
    ├── FsError
    │   ├── PathOutOfScope (+ValueError)
    │   ├── NotFound
    │   ├── IsADirectory
    │   ├── NotADirectory
    │   ├── OverlayFull
    │   ├── OverlayClosed
    │   └── OverlayApplyFailed
    ├── OverlayStoreError (+OSError)
    │   # blobs (fore.actors.blobs) and @path file references (fore.actors.filerefs)
    ├── BlobStoreError
    │   ├── InvalidBlobId (+ValueError)
    │   ├── BlobNotFound (+LookupError)
    │   └── BlobKindError (+TypeError)
    ├── InspectError
    ├── ResolveError
    │   # models (fore.actors.llm)
    ├── LlmException
    ├── ScriptError (+ValueError)
    ├── ArgumentsInvalid (+ValueError)
    │   # the worker and its hooks (fore.actors.worker), structured output (fore.actors.output)
    ├── WorkerBusy (+RuntimeError)
    ├── PhaseError (+RuntimeError)
    ├── HookError
    │   └── HookTimeout
    ├── ConditionError
    ├── OutputValidationError (+ValueError)
    ├── OutputTypeError (+TypeError)
    ├── StructuredOutputUnavailable (+RuntimeError)
    │   # speculation (fore.actors.speculation)
    ├── ApplyOutcomeUnknown (+RuntimeError)
    ├── SpeculationPhaseError (+RuntimeError)
    │   # the session store (fore.actors.store)
    ├── StoreError
    │   ├── StoreUrlError (+ValueError)
    │   ├── StoreUnavailable
    │   ├── StoreCorrupted
    │   ├── SchemaError
    │   │   ├── SchemaTooNew
    │   │   └── NotASessionStore
    │   ├── StoreBusy
    │   ├── StoreClosed
    │   ├── InvalidRecord (+ValueError)
    │   ├── SessionNotFound
    │   ├── SessionExists
    │   ├── SessionLeased
    │   └── LeaseLost
    ├── PgClusterError (+RuntimeError)
    │   # telemetry (fore.actors.telemetry)
    ├── TelemetryUnavailable (+ImportError)
    │   # distributed runtimes (fore.distributed)
    ├── ShardLost
    ├── NoShardAvailable
    ├── ShardUnavailable
    ├── WorkspaceUnreachable (+FileNotFoundError)
    ├── SessionNotHere (+LookupError)
    ├── InputWithdrawn
    ├── NotShippable (+TypeError)
    │   # resume, chat, the CLI and the benchmarks (fore.supervision, fore.bench)
    ├── ModelNotRebuildable (+ValueError)
    ├── ModelSwitchError (+ValueError)
    ├── UnknownCommand (+ValueError)
    ├── ChatError
    ├── UsageError
    ├── BenchFailed (+RuntimeError)
    ├── BenchSetupError (+RuntimeError)
    └── ServerFailed (+RuntimeError)

Deliberately local (control flow that never leaves its module or package, so
not part of the tree and not exported): ``_Doubt`` (gate.git_files),
``_Abort`` (gate.shell.context), ``_BadOption`` (gate.rules.options),
``_SedError`` (gate.rules.sed), ``_NotStrict`` (output.schema), ``_Cancelled``
(tools.proctrack._subreaper), ``_CutConnection``, ``_UsageError``, ``_ParserExit``
(llm.mock_server), ``_NotHere``, ``_Died`` (distributed.calls), ``_Failed``
(supervision.cli), and the overlay's internal ``PathChanged``
(overlay._realfs) and ``NotRestored`` (overlay._keep), which the overlay's
apply and its rollback catch (a failed undo is named in the
:class:`OverlayApplyFailed` that the apply raises).
``tests/project/test_errors.py`` checks all of this, this drawing included.

One concept, kept whole although it is over 600 lines: it *is* the error
tree, by design (issue 22 point 4). Splitting it by package would bring back
what it replaced -- exceptions spread over many modules with no common root,
clashing names -- and the test above fails on an exception defined anywhere
else.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import pykka

if TYPE_CHECKING:
    from fore.messages.llm import LlmError
    from fore.messages.session import HookFailure, HookFailureKind, TurnResult

__all__ = [
    "ActorCrashed",
    "ActorStopped",
    "ActorSystemClosed",
    "ApplyOutcomeUnknown",
    "ArgumentsInvalid",
    "AskTimeout",
    "BenchFailed",
    "BenchSetupError",
    "BlobKindError",
    "BlobNotFound",
    "BlobStoreError",
    "BlockingOnDispatcherError",
    "Cancelled",
    "ChatError",
    "ChildRejectedError",
    "ConditionError",
    "ForeError",
    "FsError",
    "HookError",
    "HookTimeout",
    "InputWithdrawn",
    "InspectError",
    "InvalidBlobId",
    "InvalidRecord",
    "IsADirectory",
    "LeaseLost",
    "LlmException",
    "ModelNotRebuildable",
    "ModelSwitchError",
    "NoShardAvailable",
    "NotADirectory",
    "NotASessionStore",
    "NotFound",
    "NotShippable",
    "OutputTypeError",
    "OutputValidationError",
    "OverlayApplyFailed",
    "OverlayClosed",
    "OverlayFull",
    "OverlayStoreError",
    "PathOutOfScope",
    "PatternError",
    "PgClusterError",
    "PhaseError",
    "PreviewApplyFailed",
    "ResolveError",
    "ResolveErrorKind",
    "RunnerSaturated",
    "SchemaError",
    "SchemaTooNew",
    "ScriptError",
    "ServerFailed",
    "SessionExists",
    "SessionLeased",
    "SessionNotFound",
    "SessionNotHere",
    "ShardLost",
    "ShardUnavailable",
    "SpeculationPhaseError",
    "StalePreview",
    "StoreBusy",
    "StoreClosed",
    "StoreCorrupted",
    "StoreError",
    "StoreUnavailable",
    "StoreUrlError",
    "StructuredOutputUnavailable",
    "SupervisorIntensityError",
    "TelemetryUnavailable",
    "ToolCancelled",
    "ToolDefinitionError",
    "ToolError",
    "ToolLoopClosed",
    "TrackingUnavailable",
    "UnhandledMessageError",
    "UnknownCommand",
    "UsageError",
    "WorkerBusy",
    "WorkspaceUnreachable",
    "alert_text",
]


class ForeError(Exception):
    """Base class of every exception Fore defines."""


# -- The actor system ----------------------------------------------------------


class AskTimeout(ForeError, pykka.Timeout):
    """An ask was not answered before its deadline.

    A subclass of :class:`pykka.Timeout`, so code written against pykka keeps
    catching it.
    """


class ActorCrashed(ForeError):
    """The actor failed while handling this message (or before reaching it).

    Answers the ask whose handler raised a ``BaseException`` such as
    ``SystemExit``: the asker gets this instead of the raw ``BaseException``
    so that a ``SystemExit`` inside one actor never unwinds another thread.
    """


class ActorStopped(ForeError, pykka.ActorDeadError):
    """The actor is not running: it stopped or was killed before it answered, a
    supervised child is gone for good (or restarting with its handle's buffer full),
    or a session's event stream is closed.

    A subclass of :class:`pykka.ActorDeadError`, so code written against pykka (and
    pykka's own test suite) keeps catching it; under :class:`ForeError`, so a
    caller of a session -- a Tab whose controller was killed, say -- needs no pykka
    import to catch what Fore raised.
    """


class UnhandledMessageError(ForeError):
    """An actor received a message type it has no handler for."""


class BlockingOnDispatcherError(ForeError, RuntimeError):
    """A handler tried to wait on a pending future on a dispatcher thread.

    A dispatcher thread runs many actors; one that sits in ``future.get()``
    (a blocking ``ask``, ``ref.stop()``, a proxy's ``.get()``) serves nobody
    until the answer comes, and a few such waits stall the whole runtime --
    or deadlock it when the answer must come from an actor queued behind
    them. Raised instead of waiting: use :meth:`PooledActor.ask_then`, a
    future's ``add_done_callback``, or :meth:`PooledActor.run_blocking`.
    """


class ActorSystemClosed(ForeError, RuntimeError):
    """An actor was started in an actor system that is shutting down (or shut down).

    Without this, an actor registered after the shutdown took its snapshot of
    the live actors would sit on a dispatcher with no threads: its asks would
    be answered only at their deadlines.
    """


class Cancelled(ForeError):
    """Raised by :meth:`CancelScope.raise_if_cancelled` inside cancelled work."""


# -- Supervision ---------------------------------------------------------------


class SupervisorIntensityError(ForeError, RuntimeError):
    """A supervisor gave up: its children restarted too often."""


class ChildRejectedError(ForeError, TypeError):
    """A child spec's ``start`` did not return the ``ActorRef`` of a pooled actor.

    Only :class:`~actors.core.pooled.PooledActor`\\ s report their exits to a
    supervisor; whatever else ``start`` returned is stopped at once and the
    child is not retried (it would fail the same way every time).
    """


# -- Tools ---------------------------------------------------------------------


class ToolError(ForeError):
    """An expected failure; its message is the error result the model sees."""


class StalePreview(ToolError):
    """A file changed between the preview and the apply.

    Not ``retryable``: the staged content can never apply again, so the
    ``resolve`` tool stops forcing the action (it stays pending so the model
    can discard it and preview again).
    """

    retryable = False


class PreviewApplyFailed(ToolError):
    """Writing the files failed; says whether the workspace was left unchanged."""


class ToolCancelled(ForeError):
    """Raised inside a tool when its call was cancelled."""


class ToolDefinitionError(ForeError, TypeError):
    """A function that cannot become a tool; the message names the function and the parameter."""


class ToolLoopClosed(ForeError, RuntimeError):
    """The tool loop (async tools' event loop) is shut down: nothing new runs on it."""


class RunnerSaturated(ForeError, RuntimeError):
    """No tool-runner thread is free and the thread limit is reached."""


class TrackingUnavailable(ForeError, RuntimeError):
    """The requested process-tracking backend (``shell`` calls) cannot work on this machine.

    The message says why.
    """


class PatternError(ForeError, ValueError):
    """A glob the tool cannot use; the message is meant for the model."""


# -- Files ---------------------------------------------------------------------


class FsError(ForeError):
    """A filesystem operation failed; the message is meant for the model."""


class PathOutOfScope(FsError, ValueError):
    """The path leads outside the workspace."""


class NotFound(FsError):
    """The path does not exist."""


class IsADirectory(FsError):
    """A file was expected."""


class NotADirectory(FsError):
    """A directory was expected."""


class OverlayFull(FsError):
    """A write would grow the overlay's upper layer past its size bound."""


class OverlayClosed(FsError):
    """The overlay was closed (applied or discarded); it accepts no more changes."""


class OverlayApplyFailed(FsError):
    """Apply could not complete for a reason other than a conflict.

    ``applied`` names the real paths it did change before it stopped (only an
    apply that failed after its commit point changes any; its journal stays,
    and recovery finishes it at the next start).
    """

    def __init__(self, message: str, applied: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.applied: tuple[str, ...] = tuple(applied)


class OverlayStoreError(ForeError, OSError):
    """The overlay root is unusable (not a directory, or owned by another user)."""


# -- Blobs ---------------------------------------------------------------------


class BlobStoreError(ForeError):
    """Base of every blob-store failure (I/O errors, corrupt blobs, ...)."""


class InvalidBlobId(BlobStoreError, ValueError):
    """A blob id that is not a UUID (or not a ``uuid.UUID``/``str`` at all)."""


class BlobNotFound(BlobStoreError, LookupError):
    """No blob with this id (never stored, or removed by retention)."""


class BlobKindError(BlobStoreError, TypeError):
    """A text-only operation (line access) on a structured blob."""


class InspectError(ForeError):
    """Any ``inspect`` failure; ``message`` is what the model sees (one line)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# -- File references -----------------------------------------------------------


class ResolveErrorKind(StrEnum):
    """Why a reference did not resolve."""

    OUT_OF_SCOPE = "out_of_scope"
    NOT_FOUND = "not_found"
    BINARY = "binary"
    IO = "io"


_REASONS = {
    ResolveErrorKind.OUT_OF_SCOPE: "outside the workspace",
    ResolveErrorKind.NOT_FOUND: "not found",
    ResolveErrorKind.BINARY: "binary file",
}


def alert_text(path: str, reason: str) -> str:
    """The one sentence the user sees for an unresolved reference."""
    return f"file ref @{path} could not be resolved: {reason}"


class ResolveError(ForeError):
    """A reference that cannot be attached.

    ``path`` is the path as the user typed it; ``reason`` is a short phrase
    for the alert ("not found", "outside the workspace", "binary file",
    "I/O error: ...").
    """

    def __init__(self, kind: ResolveErrorKind, path: str, reason: str | None = None) -> None:
        self.kind = kind
        self.path = path
        self.reason = reason if reason is not None else _REASONS.get(kind, "I/O error")
        super().__init__(alert_text(path, self.reason))


# -- Models --------------------------------------------------------------------


class LlmException(ForeError):
    """Carries an :class:`LlmError` through the provider code."""

    def __init__(self, error: LlmError) -> None:
        super().__init__(f"{error.kind}: {error.message}")
        self.error = error


class ScriptError(ForeError, ValueError):
    """A script file that cannot be read, parsed or validated.

    The message names the file and either the JSON position (syntax errors)
    or the pydantic field path (validation errors), so whoever wrote the
    script can fix it without reading a traceback.
    """


class ArgumentsInvalid(ForeError, ValueError):
    """A call's arguments text is not a JSON object: why, and where (char offset)."""

    def __init__(self, reason: str, position: int | None = None) -> None:
        # (json's "Unterminated string starting at" already ends with the "at")
        at = reason if position is None else f"{reason.removesuffix(' at')} at char {position}"
        super().__init__(at)
        self.reason = reason
        self.position = position


# -- The worker ----------------------------------------------------------------


class WorkerBusy(ForeError, RuntimeError):
    """A submit arrived while a run is in progress."""


class PhaseError(ForeError, RuntimeError):
    """A move between two run phases that the worker's ``run_state.ALLOWED`` does not list.

    A worker bug, never a user's mistake.
    """


class HookError(ForeError):
    """A hook failed; names the event, the hook and how (``kind``)."""

    kind: HookFailureKind = "raised"

    def __init__(
        self, event: StrEnum, hook: str, message: str, *, kind: HookFailureKind | None = None
    ) -> None:
        # ``event`` is a fore.actors.worker.hook_results.HookEvent: typed by its
        # base here, since this module sits below the worker.
        super().__init__(f"{event.value} hook {hook!r}: {message}")
        self.event = event
        self.hook = hook
        self.message = message
        if kind is not None:
            self.kind = kind

    def failure(self) -> HookFailure:
        """The typed form a ``TurnResult`` carries (callers branch on it, not on text)."""
        from fore.messages.session import HookFailure  # pydantic: not on ``import fore``

        return HookFailure(
            event=self.event.value, hook=self.hook, kind=self.kind, message=self.message
        )


class HookTimeout(HookError):
    """A hook (or its ``when`` condition) ran longer than its timeout."""

    kind: HookFailureKind = "timeout"


class ConditionError(ForeError):
    """A hook's ``when`` condition raised (raised by :func:`run_hook`)."""


# -- Structured output ---------------------------------------------------------


class OutputValidationError(ForeError, ValueError):
    """A structured turn gave no valid output (``Session.ask``).

    Either every answer failed validation until the re-asks ran out
    (``result.status`` is ``completed`` and ``result.output_error`` names the
    last errors), or the run ended another way first (cancelled, an error, the
    turn budget): ``result.status`` says how. ``result`` is the whole
    :class:`~messages.session.TurnResult`.
    """

    def __init__(self, message: str, result: TurnResult[Any]) -> None:
        super().__init__(message)
        self.result = result


class OutputTypeError(ForeError, TypeError):
    """An ``output_type`` that pydantic cannot validate or describe as a JSON schema."""


class StructuredOutputUnavailable(ForeError, RuntimeError):
    """A structured submit reached a worker whose interceptors cannot handle it."""


# -- Speculation ---------------------------------------------------------------


class ApplyOutcomeUnknown(ForeError, RuntimeError):
    """An accept's apply ended in a way that does not say which files it changed
    (the ask timed out, the speculator crashed): the suggestion must not be run
    again on top of a tree that may be half-applied."""


class SpeculationPhaseError(ForeError, RuntimeError):
    """A speculation was moved between phases the controller's state machine does not
    allow (``fore.actors.speculation.states.ALLOWED``): a bug in the controller."""


# -- The session store ---------------------------------------------------------


class StoreError(ForeError):
    """Base of every session-store error."""


class StoreUrlError(StoreError, ValueError):
    """The store URL is malformed or of a scheme no backend handles."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or opened (server down, bad path, no permission)."""


class StoreCorrupted(StoreError):
    """The database file is not a database, or its contents are damaged."""


class SchemaError(StoreError):
    """The database's schema is not one this version of Fore can use."""


class SchemaTooNew(SchemaError):
    """The database was migrated by a newer Fore: refused, never downgraded."""

    def __init__(self, found: int, supported: int) -> None:
        super().__init__(
            f"the session store has schema version {found}, newer than the {supported} this "
            f"Fore supports; upgrade Fore (the store is left untouched)"
        )
        self.found = found
        self.supported = supported


class NotASessionStore(SchemaError):
    """The database holds other tables but no Fore schema: refused rather than mixed in."""


class StoreBusy(StoreError):
    """A lock or a connection could not be had before its deadline."""


class StoreClosed(StoreError):
    """The store was closed; open a new one."""


class InvalidRecord(StoreError, ValueError):
    """What the caller asked to write breaks a rule of the store (size, id, secrets, JSON)."""


class SessionNotFound(StoreError):
    """No session of that id in the store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} in the store")
        self.session_id = session_id


class SessionExists(StoreError):
    """A session of that id is already in the store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"a session {session_id!r} is already in the store")
        self.session_id = session_id


class SessionLeased(StoreError):
    """The session is open in another process (its lease is held and not expired)."""

    def __init__(self, session_id: str, holder: str, expires_in: float) -> None:
        super().__init__(
            f"session {session_id!r} is open in another process ({holder}); its lease "
            f"expires in {max(0.0, expires_in):.0f} s unless that process renews it"
        )
        self.session_id = session_id
        self.holder = holder
        self.expires_in = expires_in


class LeaseLost(StoreError):
    """A write to a session this store does not hold (never acquired, released or taken over)."""

    def __init__(self, session_id: str, holder: str | None) -> None:
        if holder is None:
            detail = "it is not open here (open or create it first)"
        else:
            detail = f"its lease was taken over by another process ({holder})"
        super().__init__(f"cannot write session {session_id!r}: {detail}")
        self.session_id = session_id
        self.holder = holder


class PgClusterError(ForeError, RuntimeError):
    """A throwaway PostgreSQL cluster (tests, ``fore bench store``) could not be created or
    started; the message says which step and why."""


# -- Telemetry -----------------------------------------------------------------


class TelemetryUnavailable(ForeError, ImportError):
    """``Telemetry`` was asked for but the OpenTelemetry API is not installed."""


# -- Distributed runtimes ------------------------------------------------------


class ShardLost(ForeError):
    """The shard hosting the session died while a call was in flight.

    The call's outcome is unknown to the caller: a turn that had completed is in
    the store (it was written before it was reported), one that had not is
    gone. The session itself is not lost: it is resumed from the store on a live
    shard, and the next call on it goes there.
    """

    def __init__(self, session_id: str, shard: int, detail: str = "") -> None:
        text = f"the shard (#{shard}) hosting session {session_id!r} died during the call"
        if detail:
            text += f" ({detail})"
        super().__init__(text + "; the session is resumed on a live shard: call again")
        self.session_id = session_id
        self.shard = shard


class NoShardAvailable(ForeError):
    """No live shard can take the session (none on the workspace's machine, or all down)."""


class ShardUnavailable(ForeError):
    """A shard did not answer before its deadline (not known to be dead: it may be busy)."""


class WorkspaceUnreachable(ForeError, FileNotFoundError):
    """The workspace is not a directory on the machine of the shard asked to serve it.

    A shard serves only workspaces on its own machine's filesystem; open the
    session with ``node=`` naming the machine that has it (or ``node="any"``
    for a filesystem every machine mounts at the same path).
    """


class SessionNotHere(ForeError, LookupError):
    """This shard does not host the session (never did, or it was restarted since)."""

    def __init__(self, session_id: str, shard: int) -> None:
        super().__init__(f"session {session_id!r} is not open on shard #{shard}")
        self.session_id = session_id
        self.shard = shard


class InputWithdrawn(ForeError):
    """A session input arrived at its shard after its caller had withdrawn its number.

    The caller cancelled the call (a cancelled ``RemoteSession.aaccept``) and told the
    shard so; the cancel did not stop the call, which came after all. It is not
    started: the keys typed after it have gone ahead, and a Tab nobody waits for
    any more must not apply a speculation behind them.
    """

    def __init__(self, number: int) -> None:
        super().__init__(f"input #{number} was withdrawn by its caller before it arrived")
        self.number = number


class NotShippable(ForeError, TypeError):
    """An object a session needs cannot be sent to a shard (it cannot be pickled)."""


# -- Sessions, chat and the CLI ------------------------------------------------


class ModelNotRebuildable(ForeError, ValueError):
    """A resume without ``model=`` of a session whose model cannot be made from its settings."""


class ModelSwitchError(ForeError, ValueError):
    """``/model NAME`` cannot switch this session's model (one line for the person)."""


class UnknownCommand(ForeError, ValueError):
    """A chat line that starts with ``/`` but names no command (one line for the person)."""


class ChatError(ForeError):
    """Cannot start: one line for the person, exit code 2."""


class UsageError(ForeError):
    """A user mistake: reported as one line, exit code 2."""


class BenchFailed(ForeError, RuntimeError):
    """A measurement lost work or missed its deadline: its figures are not rates.

    Raised by a micro-benchmark's ``run`` (after printing what it could);
    ``fore bench <name>`` reports it as one line and exits non-zero.
    """


class BenchSetupError(ForeError, RuntimeError):
    """The benchmark could not start (the mock server, the temp directory ...)."""


class ServerFailed(ForeError, RuntimeError):
    """The benchmark's llama.cpp server did not start (or died); the message ends with its
    log's tail."""
