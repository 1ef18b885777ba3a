"""Models that answer without a server: :class:`ScriptedModel` and :class:`FunctionModel`.

* :class:`ScriptedModel` -- offline and deterministic, from the public script format
  (:mod:`~fore.actors.llm.script`), per-session cursors as the mock server keys
  conversations;
* :class:`FunctionModel` -- ``fn(request)`` decides each reply, for tests that must react
  to what they are sent.

Both stream their reply with the schedule the mock server uses (:func:`stream_reply`).
They are the testing tier's models (``fore.testing``), kept apart from the HTTP client in
:mod:`~fore.actors.llm.models`, which they share nothing with but the protocol.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from fore.actors.llm.chat_model import (
    Emit,
    RetryPolicy,
    StreamResult,
    StructuredOutput,
    _structured_output,
)
from fore.actors.llm.errors import LlmException, llm_error
from fore.actors.llm.script import (
    ScriptCursor,
    ScriptFile,
    ScriptReply,
    arguments_json,
    new_tool_call_id,
    split_fragments,
    stream_plan,
)
from fore.messages.conversation import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    UserMessage,
    item_text,
)
from fore.messages.llm import LlmRequest, LlmTextDelta, LlmToolCallDelta, Usage


def last_input_text(request: LlmRequest) -> str:
    """The text of the last user message or tool result (what scripts match on)."""
    for item in reversed(request.messages):
        if isinstance(item, UserMessage):
            return item.text
        if isinstance(item, ToolResult):
            return item.output
    return ""


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters per token) for offline usage numbers."""
    return max(0, (len(text) + 3) // 4)


async def stream_reply(
    request: LlmRequest,
    reply: ScriptReply,
    emit: Emit,
    *,
    default_ttft_ms: float = 0.0,
    default_tokens_per_s: float | None = None,
    arg_chunk_size: int = 16,
) -> StreamResult:
    """Stream one scripted reply with its latency schedule (shared by both offline models)."""
    plan = stream_plan(
        reply, default_ttft_ms=default_ttft_ms, default_tokens_per_s=default_tokens_per_s
    )
    rid = request.request_id
    for chunk, delay in zip(plan.chunks, plan.delays_s, strict=True):
        if delay > 0:
            await asyncio.sleep(delay)
        emit(LlmTextDelta(request_id=rid, text=chunk))
    calls = []
    first_delay = plan.first_token_delay_s if not plan.chunks else plan.token_interval_s
    for index, scripted in enumerate(reply.tool_calls):
        call_id = scripted.id or new_tool_call_id()
        if first_delay > 0:
            await asyncio.sleep(first_delay)
        first_delay = plan.token_interval_s
        emit(LlmToolCallDelta(request_id=rid, index=index, call_id=call_id, name=scripted.name))
        for fragment in split_fragments(arguments_json(scripted.arguments), arg_chunk_size):
            if plan.token_interval_s > 0:
                await asyncio.sleep(plan.token_interval_s)
            emit(LlmToolCallDelta(request_id=rid, index=index, arguments_delta=fragment))
        calls.append(ToolCall(id=call_id, name=scripted.name, arguments=dict(scripted.arguments)))
    if not plan.chunks and not reply.tool_calls and plan.first_token_delay_s > 0:
        await asyncio.sleep(plan.first_token_delay_s)
    chars = sum(len(item_text(item)) for item in request.messages)
    prompt = (chars + 3) // 4
    completion = len(plan.chunks) + sum(
        estimate_tokens(arguments_json(c.arguments)) for c in reply.tool_calls
    )
    usage = Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
    message = AssistantMessage(text=plan.text, tool_calls=tuple(calls))
    return StreamResult(message, usage, "tool_calls" if calls else "stop")


class ScriptedModel:
    """Offline, deterministic replies from the public script format.

    Each session consumes the script on its own (per-session cursors), exactly
    as the mock server keys conversations by the ``X-Fore-Session`` header.
    """

    def __init__(
        self,
        replies: Sequence[ScriptReply | Mapping[str, Any]] = (),
        *,
        ttft_ms: float = 0.0,
        tokens_per_s: float | None = None,
        name: str = "scripted",
        arg_chunk_size: int = 16,
        structured_output: StructuredOutput = "auto",
    ) -> None:
        self.structured_output = _structured_output(structured_output)
        """How structured output is asked for (see ``OpenAICompatible``); the
        scripted replies are served as written either way."""
        self.script = ScriptFile(
            replies=tuple(
                r if isinstance(r, ScriptReply) else ScriptReply.model_validate(r) for r in replies
            )
        )
        self.name = name
        self.retry = RetryPolicy(max_retries=0)
        self.ttft_ms = ttft_ms
        self.tokens_per_s = tokens_per_s
        self.arg_chunk_size = arg_chunk_size
        self._cursors: dict[str, ScriptCursor] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **options: Any) -> ScriptedModel:
        """Load a script file (raises a clear ``ScriptError`` on a bad file)."""
        return cls(ScriptFile.from_path(Path(path)).replies, **options)

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self.script.replies)} replies)"

    def cursor(self, session_id: str) -> ScriptCursor:
        with self._lock:
            cursor = self._cursors.get(session_id)
            if cursor is None:
                cursor = self._cursors[session_id] = ScriptCursor(self.script)
            return cursor

    def forget(self, session_id: str) -> None:
        """Drop ``session_id``'s cursor: a session reopened under that id starts afresh.

        The Runtime calls it when a session closes, so cursors do not pile up
        over a long-lived runtime.
        """
        with self._lock:
            self._cursors.pop(session_id, None)

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        reply = self.cursor(request.session_id).next_reply(
            request.purpose, last_input_text(request)
        )
        return await stream_reply(
            request,
            reply,
            emit,
            default_ttft_ms=self.ttft_ms,
            default_tokens_per_s=self.tokens_per_s,
            arg_chunk_size=self.arg_chunk_size,
        )


ReplyLike = ScriptReply | Mapping[str, Any] | str


def _no_stop_iteration(fn: Callable[[LlmRequest], ReplyLike], request: LlmRequest) -> ReplyLike:
    """``fn(request)``, with a ``StopIteration`` it raises (``next()`` on a spent iterator)
    turned into a ``RuntimeError``: asyncio cannot set one on a future, and the request
    would never be answered."""
    try:
        return fn(request)
    except StopIteration as exc:
        raise RuntimeError(f"StopIteration{f': {exc}' if str(exc) else ''}") from None


class FunctionModel:
    """``fn(request) -> reply`` decides every answer (run on the model's own threads).

    The reply has the script's shape: a :class:`ScriptReply`, a mapping that
    validates as one, or a plain string (text only). ``fn`` may raise an
    :class:`~actors.llm.errors.LlmException` to simulate a typed failure.

    ``fn`` may block (tests make it wait on events), so it runs on a
    dedicated, bounded executor of ``max_workers`` threads (created lazily),
    never on the LLM loop's default executor, which other work shares. A
    cancelled request cannot stop a running ``fn`` (a thread cannot be
    killed): its thread is busy until ``fn`` returns.

    ``requests`` keeps the most recent ``keep_requests`` requests, oldest
    dropped first (a deque with ``maxlen``): each holds a whole history, so
    keeping all of them would grow without bound over a long run.
    :meth:`forget` drops one session's (the Runtime calls it when the
    session closes).
    """

    def __init__(
        self,
        fn: Callable[[LlmRequest], ReplyLike],
        *,
        name: str = "function",
        ttft_ms: float = 0.0,
        tokens_per_s: float | None = None,
        retry: RetryPolicy | None = None,
        max_workers: int = 16,
        keep_requests: int = 1000,
        structured_output: StructuredOutput = "auto",
    ) -> None:
        if max_workers < 1 or keep_requests < 0:
            raise ValueError("max_workers must be >= 1 and keep_requests >= 0")
        self.structured_output = _structured_output(structured_output)
        """How structured output is asked for (see ``OpenAICompatible``): ``fn``
        sees ``request.response_schema``, or the ``final_answer`` tool."""
        self.fn = fn
        self.name = name
        self.ttft_ms = ttft_ms
        self.tokens_per_s = tokens_per_s
        self.retry = retry or RetryPolicy(max_retries=0)
        self.requests: deque[LlmRequest] = deque(maxlen=keep_requests)
        self._lock = threading.Lock()
        self._max_workers = max_workers
        self._executor: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"FunctionModel({getattr(self.fn, '__name__', 'fn')})"

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._max_workers, thread_name_prefix="fore-function-model"
                )
            return self._executor

    def forget(self, session_id: str) -> None:
        """Drop what this model keeps about ``session_id`` (its recorded requests)."""
        with self._lock:
            kept = [r for r in self.requests if r.session_id != session_id]
            self.requests.clear()
            self.requests.extend(kept)

    def close(self) -> None:
        """Let the executor's threads end once their ``fn`` calls return."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        with self._lock:
            self.requests.append(request)
        try:
            loop = asyncio.get_running_loop()
            raw = await loop.run_in_executor(self._pool(), _no_stop_iteration, self.fn, request)
        except LlmException:
            raise
        except Exception as exc:
            raise llm_error(
                "server", f"model function raised {type(exc).__name__}: {exc}", retryable=False
            ) from None
        reply = (
            raw
            if isinstance(raw, ScriptReply)
            else ScriptReply(text=raw)
            if isinstance(raw, str)
            else ScriptReply.model_validate(raw)
        )
        return await stream_reply(
            request,
            reply,
            emit,
            default_ttft_ms=self.ttft_ms,
            default_tokens_per_s=self.tokens_per_s,
        )
