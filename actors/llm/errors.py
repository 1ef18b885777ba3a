"""Typed LLM errors and how HTTP answers map onto them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from messages.llm import LlmError, LlmErrorKind


class LlmException(Exception):
    """Carries an :class:`LlmError` through the provider code."""

    def __init__(self, error: LlmError) -> None:
        super().__init__(f"{error.kind}: {error.message}")
        self.error = error


def llm_error(
    kind: LlmErrorKind,
    message: str,
    *,
    status: int | None = None,
    retryable: bool | None = None,
    retry_after_s: float | None = None,
    provider_message: str | None = None,
    param: str | None = None,
) -> LlmException:
    if retryable is None:
        retryable = kind in ("rate_limit", "server", "connection", "timeout")
    return LlmException(
        LlmError(
            kind=kind,
            message=message,
            status=status,
            retryable=retryable,
            retry_after_s=retry_after_s,
            provider_message=provider_message,
            param=param,
        )
    )


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


def provider_error_details(body: bytes) -> tuple[str | None, str | None]:
    """The provider's error message and ``param`` from an OpenAI-style error body."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", errors="replace").strip()
        return (text[:500] or None), None
    error = data.get("error") if isinstance(data, Mapping) else None
    if isinstance(error, Mapping):
        message = error.get("message")
        param = error.get("param")
        return (str(message) if message is not None else None), (
            str(param) if param is not None else None
        )
    if isinstance(error, str):
        return error, None
    return None, None


def error_from_status(status: int, body: bytes, headers: Mapping[str, str]) -> LlmException:
    """Map a non-200 answer to a typed error, keeping the provider's message."""
    message, param = provider_error_details(body)
    detail = f"HTTP {status}" + (f": {message}" if message else "")
    if status in (401, 403):
        return llm_error("auth", detail, status=status, provider_message=message, param=param)
    if status == 429:
        return llm_error(
            "rate_limit",
            detail,
            status=status,
            retry_after_s=parse_retry_after(headers.get("retry-after")),
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
            retry_after_s=parse_retry_after(headers.get("retry-after")),
            provider_message=message,
            param=param,
        )
    return llm_error("protocol", f"unexpected {detail}", status=status, provider_message=message)
