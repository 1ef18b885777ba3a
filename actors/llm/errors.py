"""Typed LLM errors and how HTTP answers map onto them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from fore.errors import LlmException
from fore.messages.llm import Deadline, LlmError, LlmErrorKind

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["LlmException"]


def llm_error(
    kind: LlmErrorKind,
    message: str,
    *,
    status: int | None = None,
    retryable: bool | None = None,
    retry_after_s: float | None = None,
    provider_message: str | None = None,
    param: str | None = None,
    deadline: Deadline | None = None,
) -> LlmException:
    if retryable is None:
        retryable = kind in ("rate_limit", "server", "connection", "timeout", "incomplete")
    return LlmException(
        LlmError(
            kind=kind,
            message=message,
            status=status,
            retryable=retryable,
            retry_after_s=retry_after_s,
            provider_message=provider_message,
            param=param,
            deadline=deadline,
        )
    )


def format_size(n: int) -> str:
    """A size for a message: ``16 MiB``, ``64 KiB``, ``300 B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value.is_integer() else f"{value:.1f} {unit}"
    return f"{n} B"


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        import time

        seconds = when.timestamp() - (now if now is not None else time.time())
    return max(0.0, min(seconds, 3600.0))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ufffd]")


MAX_PROVIDER_MESSAGE = 500
"""Characters of a provider's error message kept (a hostile server may send megabytes)."""


def one_line(text: str, limit: int = MAX_PROVIDER_MESSAGE) -> str:
    """``text`` as one readable line of at most ``limit`` characters: a provider's
    message goes into logs, a TUI status line and exception messages, so control
    characters and newlines are spaces and a flood is cut with an ellipsis."""
    text = " ".join(_CONTROL.sub(" ", text[: limit * 4]).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def provider_error_details(body: bytes) -> tuple[str | None, str | None]:
    """The provider's error message and ``param`` from an OpenAI-style error body."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        # Whatever the body is (an HTML page, binary junk), a readable line of it.
        text = body[:2000].decode("utf-8", errors="replace")
        text = " ".join(_CONTROL.sub(" ", text).split())
        return (text[:500] or None), None
    error = data.get("error") if isinstance(data, Mapping) else None
    if isinstance(error, Mapping):
        message = error.get("message")
        param = error.get("param")
        return (one_line(str(message)) if message is not None else None), (
            one_line(str(param)) if param is not None else None
        )
    if isinstance(error, str):
        return one_line(error), None
    return None, None


def error_from_status(status: int, body: bytes, headers: Mapping[str, str]) -> LlmException:
    """Map a non-200 answer to a typed error, keeping the provider's message."""
    message, param = provider_error_details(body)
    return _error_for_status(status, message, param, headers.get("retry-after"))


def _error_for_status(
    status: int, message: str | None, param: str | None, retry_after: str | None
) -> LlmException:
    detail = f"HTTP {status}" + (f": {message}" if message else "")
    if status in (401, 403):
        return llm_error("auth", detail, status=status, provider_message=message, param=param)
    if status == 429:
        return llm_error(
            "rate_limit",
            detail,
            status=status,
            retry_after_s=parse_retry_after(retry_after),
            provider_message=message,
            param=param,
        )
    if status == 408:
        return llm_error("timeout", detail, status=status, provider_message=message)
    if 400 <= status < 500:
        return llm_error(
            "bad_request", detail, status=status, provider_message=message, param=param
        )
    if status >= 500:
        return llm_error(
            "server",
            detail,
            status=status,
            retry_after_s=parse_retry_after(retry_after),
            provider_message=message,
            param=param,
        )
    return llm_error("protocol", f"unexpected {detail}", status=status, provider_message=message)


# What an error object's ``type`` / ``code`` says, checked in this order. Providers
# spell these differently (OpenAI ``invalid_request_error`` + ``context_length_exceeded``,
# Anthropic-style ``overloaded_error``, vLLM ``BadRequestError``, OpenRouter numeric
# codes), so the match is on lower-cased fragments.
_KIND_HINTS: tuple[tuple[LlmErrorKind, tuple[str, ...]], ...] = (
    ("rate_limit", ("rate_limit", "ratelimit", "quota", "too_many_requests")),
    ("auth", ("auth", "api_key", "permission", "forbidden")),
    (
        "bad_request",
        ("context_length", "invalid_request", "badrequest", "bad_request", "invalid_prompt"),
    ),
    ("timeout", ("timeout", "timed_out")),
    ("server", ("server", "overloaded", "internal", "api_error", "unavailable")),
)


def error_from_payload(error: Any, *, where: str) -> LlmException:
    """Type an error object a provider sent with status 200 (in a stream or a body).

    Mid-stream errors are how providers report what a status code would
    otherwise say (the context is too long, a rate limit hit after the headers
    went out), so the ``type`` / ``code`` decide the kind and with it whether
    a retry can help: a context-length error must not be retried as if the
    server had hiccuped. A numeric ``code`` is read as an HTTP status.
    Unrecognised errors stay retryable server errors.
    """
    fields: tuple[Any, ...] = ()
    if isinstance(error, Mapping):
        raw_message = error.get("message")
        message = one_line(str(raw_message)) if raw_message is not None else None
        raw_param = error.get("param")
        param = one_line(str(raw_param)) if raw_param is not None else None
        fields = (error.get("type"), error.get("code"), error.get("status"))
    else:
        message, param = one_line(str(error)), None
    detail = f"error in {where}" + (f": {message}" if message else "")
    for value in fields:
        status = _as_status(value)
        if status is not None:
            mapped = _error_for_status(status, message, param, None).error
            return LlmException(mapped.model_copy(update={"message": detail, "status": None}))
    hints = " ".join(str(v).lower() for v in fields if v is not None)
    for kind, fragments in _KIND_HINTS:
        if any(fragment in hints for fragment in fragments):
            retryable = None if "insufficient_quota" not in hints else False
            return llm_error(
                kind, detail, retryable=retryable, provider_message=message, param=param
            )
    return llm_error("server", detail, retryable=True, provider_message=message, param=param)


def _as_status(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and 400 <= value < 600:
        return value
    return None
