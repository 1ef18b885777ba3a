"""A mock OpenAI-compatible Chat Completions server on 127.0.0.1 (``fore mock-llm``).

Tests and benchmarks need a model that runs offline *and* a real HTTP server,
so the real client path (connection pool, SSE parsing, timeouts, retries,
cancellation) is exercised exactly as against OpenAI, vLLM or llama.cpp. This
package is that server: starlette + uvicorn, serving either a scripted reply
file (:mod:`actors.llm.script`, the same format and matching rules as the
in-process ``ScriptedModel``) or deterministic generated text.

Wire protocol (``POST /v1/chat/completions``)
---------------------------------------------
The OpenAI request body (``model``, ``messages``, ``tools``, ``tool_choice``,
``stream``, ``stream_options.include_usage`` ...). ``stream: true`` answers
``text/event-stream``: a role chunk, ``delta.content`` chunks (word-ish tokens,
see :func:`actors.llm.script.stream_plan`), then per tool call one
``delta.tool_calls`` entry with ``index``, ``id``, ``type`` and
``function.name`` (empty ``arguments``) followed by ``function.arguments``
fragments of ``tool_args_chunk_chars`` characters, a final chunk with
``finish_reason`` (``"stop"`` / ``"tool_calls"``), a usage chunk
(``choices: []``) when ``stream_options.include_usage`` is true (every other
chunk then carries ``"usage": null``, as OpenAI does), and ``data: [DONE]``.
Otherwise a ``chat.completion`` JSON body. ``POST /v1/messages`` speaks Anthropic's
Messages API on the same script, faults and records, with its prompt-cache
accounting (:mod:`.anthropic`).

Request headers
---------------
``X-Fore-Session``      conversation key for script consumption (default ``default``)
``X-Fore-Purpose``      purpose matched against ``when.purpose`` (default ``main``)
``X-Fore-Request-Id``   labels the request in the records and stats
``X-Mock-TTFT-Ms``      time to first token for this request (a reply's own wins)
``X-Mock-Tokens-Per-S`` token rate for this request (a reply's own wins)
``X-Mock-Fault``        inject a fault into this request (see :data:`FAULT_KINDS`)
``X-Mock-Retry-After``  seconds for the ``Retry-After`` of an injected ``429``
``X-Mock-Stall-S``      how long an injected ``stall`` lasts
``X-Mock-Args-Chunk-Chars`` tool-argument fragment size for this request

Control endpoints
-----------------
``GET /mock/stats`` (:class:`MockStats`), ``GET /mock/requests`` (recorded
requests, arrival order, bounded ring), ``POST /mock/faults`` (a
:class:`FaultSpec`), ``POST /mock/reset``, ``POST /mock/script`` (a script in
the public format) / ``DELETE /mock/script`` (back to generated text),
``GET /mock/health`` and ``GET /v1/models``.

Faults (:data:`FAULT_KINDS`)
----------------------------
``500`` / ``401`` / ``400``  that status with an OpenAI-format error body;
``529``                      Anthropic's "overloaded" status (an ``overloaded_error`` body);
``429``                      status 429 with a ``Retry-After`` header (seconds);
``malformed``                a stream chunk that is not valid JSON (the stream goes on to
                             ``[DONE]``); non-streaming: a 200 body that is not JSON;
``truncated``                the stream ends cleanly after about half its chunks, with no
                             ``finish_reason`` and no ``[DONE]``; non-streaming: a cut-short
                             JSON body;
``bad_tool_args``            tool-call argument fragments that never form valid JSON (a
                             call is synthesised when the reply has none);
``stall``                    headers and the role chunk, then silence for ``stall_s``
                             (then the normal rest); ends early when the client leaves;
``cut``                      the connection is closed mid-stream (mid-body when not
                             streaming): the client sees an incomplete chunked body;
``reject_tool_choice``       400 ``invalid_request_error`` with ``param: "tool_choice"``,
                             only for requests whose ``tool_choice`` names a function
                             (other requests pass and do not use up a queued fault);
``stream_error``             about half the chunks, then an in-stream ``error`` chunk
                             (``invalid_request_error`` / ``context_length_exceeded``) and
                             the end of the body; non-streaming: that error with status 400;
``linger``                   the whole stream through ``[DONE]``, then the body stays open
                             for ``stall_s`` (ends early when the client leaves);
                             non-streaming: no effect;
``not_sse``                  status 200 with an HTML page instead of the answer (what a
                             misrouted proxy or captive portal sends).

A faulted request never consumes a scripted reply (faults serve a *peeked*
reply), so a client that retries gets the scripted answer.

Strictness
----------
The mock is at least as strict as the real servers Fore meets (OpenAI,
llama.cpp's server), so a test against it catches what they would refuse.
Always (400): ``n`` other than 1; a ``tool_choice`` without ``tools``, or naming
a function that is not among them; a ``response_format`` other than ``text`` /
``json_object`` / ``json_schema``, JSON mode without the word "json" in the
messages (OpenAI's rule), and a ``json_schema`` format OpenAI refuses (no name,
an invalid schema, or with ``strict`` a schema outside its structured-output
rules: :mod:`actors.llm.mock_schema`). Always honoured: a named ``tool_choice``
forces that call, ``none`` allows none, ``required`` at least one; JSON mode
answers a JSON object, a ``json_schema`` format JSON matching the schema.
Strict mode (the default; ``MockLlmServer(strict=False)`` / ``--lenient`` turns
it off for tests that deliberately exercise a lenient server), also 400: a
message whose ``content`` is not a string (``null`` on an assistant message with
tool calls -- OpenAI accepts it, llama.cpp-class servers answer 500), an orphan
``tool`` message or an unanswered tool call, and a ``max_tokens`` /
``max_completion_tokens`` above the model's output limit (``max_output_tokens``,
16,384 by default).

Running it
----------
In-process (tests): ``with MockLlmServer(script) as server: server.base_url``
-- uvicorn in a background thread with its own event loop. Separate process
(benchmarks that need their own GIL): ``with MockLlmServer.spawn(...) as
server:`` runs ``python -m actors.llm.mock_server --port 0`` and talks to the
control endpoints over HTTP; same API. The CLI is :func:`main`.

Layout
------
One module per part, so each can be read on its own (the names above stay
importable from this package):

* :mod:`.settings` -- the control surface's data: settings, fault specs, stats, records;
* :mod:`.strict` -- reading a request and the strictness checks;
* :mod:`.replies` -- generated text, the reply shaped by the request, the planned answer;
* :mod:`.faults` -- injected faults, the deliberate cut, the error answers;
* :mod:`.sse` -- SSE framing of a stream, with the in-body faults;
* :mod:`.app` -- the ASGI app and its state (:class:`MockLlmApp`);
* :mod:`.anthropic` -- the same app's Anthropic Messages endpoint, with its request
  checks (:mod:`.anthropic_strict`) and prompt cache (:mod:`.anthropic_cache`);
* :mod:`.control` / :mod:`.server` / :mod:`.spawned` -- the control protocol, the
  in-process server (a thread) and the child-process one;
* :mod:`.cli` -- ``fore mock-llm`` (``python -m fore.actors.llm.mock_server``).
"""

from __future__ import annotations

from fore.actors.llm.mock_server.app import MockLlmApp
from fore.actors.llm.mock_server.cli import main
from fore.actors.llm.mock_server.control import MockLlmControl
from fore.actors.llm.mock_server.replies import generated_text
from fore.actors.llm.mock_server.server import MockLlmServer
from fore.actors.llm.mock_server.settings import (
    DEFAULT_SESSION,
    FAULT_KINDS,
    FaultKind,
    FaultSpec,
    MockSettings,
    MockStats,
    Outcome,
    RecordedRequest,
)
from fore.actors.llm.mock_server.spawned import PORT_LINE_PREFIX, SpawnedMockLlmServer

__all__ = [
    "DEFAULT_SESSION",
    "FAULT_KINDS",
    "PORT_LINE_PREFIX",
    "FaultKind",
    "FaultSpec",
    "MockLlmApp",
    "MockLlmControl",
    "MockLlmServer",
    "MockSettings",
    "MockStats",
    "Outcome",
    "RecordedRequest",
    "SpawnedMockLlmServer",
    "generated_text",
    "main",
]
