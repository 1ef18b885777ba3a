"""One structured turn's contract: what is asked for, how answers are judged, what came of it.

Plain code, no actor: the :class:`~actors.output.interceptor.OutputInterceptor`
drives it on the worker's thread and the worker reads the outcome into the
``TurnResult``. Everything the model is told back (validation errors, the
reminder) is bounded, so a huge or hostile answer cannot grow history
without limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter, ValidationError

from fore.actors.output.schema import (
    RESULT_KEY,
    adapter_for,
    schema_name,
    strict_schema,
    wire_schema,
    wrapper_model,
)
from fore.errors import ForeError, OutputValidationError
from fore.messages.llm import ResponseSchema
from fore.messages.session import OutputRequest, RunStatus
from fore.messages.tools import ToolDefinition

__all__ = [
    "DEFAULT_MAX_OUTPUT_RETRIES",
    "FINAL_ANSWER",
    "MAX_ERRORS_SHOWN",
    "MAX_ERROR_CHARS",
    "OutputRun",
    "OutputValidationError",
    "Strategy",
    "compact_errors",
    "output_request",
]

Strategy = Literal["json_schema", "tool"]
"""How the model is asked for the value: the provider's JSON-schema response format,
or a ``final_answer`` tool whose arguments are the value."""

DEFAULT_MAX_OUTPUT_RETRIES = 2
"""Re-asks after an answer that does not validate (``submit(max_output_retries=...)``)."""

FINAL_ANSWER = "final_answer"
"""The final-answer tool's name (another is chosen if a session tool has it)."""

MAX_ERRORS_SHOWN = 8
"""Validation errors quoted back to the model, at most (the rest are counted)."""

MAX_ERROR_CHARS = 2000
"""The validation-error text given to the model and kept in ``output_error``, at most."""


def output_request(
    output_type: Any, *, max_retries: int = DEFAULT_MAX_OUTPUT_RETRIES
) -> OutputRequest:
    """The :class:`OutputRequest` of a submit asking for ``output_type``.

    Raises :class:`~actors.output.schema.OutputTypeError` (one line, naming
    the type) at once, in the caller's thread, for a type pydantic cannot
    handle -- never later inside the run.
    """
    if max_retries < 0:
        raise ValueError("max_output_retries must not be negative")
    adapter = adapter_for(output_type)
    return OutputRequest(
        name=schema_name(output_type),
        json_schema=adapter.json_schema(),
        output_type=output_type,
        max_retries=max_retries,
    )


def _loc(parts: Iterable[int | str]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(the value)"


def compact_errors(exc: ValidationError, *, limit: int = MAX_ERRORS_SHOWN) -> str:
    """pydantic's errors, one per line as ``where: what`` (no inputs, no URLs), bounded."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    lines = [f"- {_loc(err['loc'])}: {err['msg']}" for err in errors[:limit]]
    if len(errors) > limit:
        lines.append(f"- ... and {len(errors) - limit} more")
    text = "\n".join(lines)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return text


def _strip_fence(text: str) -> str | None:
    """The inside of a Markdown code fence around the whole text, if there is one."""
    stripped = text.strip()
    if not stripped.startswith("```") or not stripped.endswith("```") or len(stripped) < 6:
        return None
    body = stripped[3:-3]
    newline = body.find("\n")
    if newline >= 0 and body[:newline].strip().isidentifier():
        body = body[newline + 1 :]  # ```json
    return body


@dataclass
class OutputRun:
    """The contract of one structured run and how it is going (see module docs)."""

    request: OutputRequest
    strategy: Strategy = "tool"
    tool_name: str = FINAL_ANSWER
    failures: int = 0
    """Answers that did not validate (each one re-asked while ``failures <= max_retries``)."""
    value: Any = None
    done: bool = False
    """An answer validated: ``value`` is the output."""
    last_errors: str | None = None
    gave_up: bool = False
    """The re-asks ran out: the run ends without a value."""
    answer: Any = None
    """The assistant message that gave the value or the last invalid answer."""
    _wire: tuple[dict[str, Any], bool] | None = field(default=None, repr=False)
    _validator: TypeAdapter[Any] | type[BaseModel] | None = field(default=None, repr=False)

    # -- what the model is shown -------------------------------------------------------------

    @property
    def wrapped(self) -> bool:
        return self._wire_schema()[1]

    def _wire_schema(self) -> tuple[dict[str, Any], bool]:
        if self._wire is None:
            self._wire = wire_schema(self.request.json_schema)
        return self._wire

    def response_schema(self) -> ResponseSchema:
        """The JSON-schema response format (strict where the type allows)."""
        schema, _ = self._wire_schema()
        strict = strict_schema(schema)
        return ResponseSchema(
            name=self.request.name,
            json_schema=strict if strict is not None else schema,
            strict=strict is not None,
        )

    def tool_definition(self, taken: Sequence[str] = ()) -> ToolDefinition:
        """The final-answer tool (named so that it clashes with none of ``taken``)."""
        name = FINAL_ANSWER
        n = 1
        while name in taken:
            n += 1
            name = f"{FINAL_ANSWER}_{n}"
        self.tool_name = name
        schema, wrapped = self._wire_schema()
        what = f"the value under {RESULT_KEY!r}" if wrapped else "the answer itself"
        return ToolDefinition(
            name=name,
            description=(
                "Give your final answer by calling this tool once you have it; its arguments "
                f"are {what}, matching the schema exactly. The answer is checked: if it is "
                "invalid you are told why and may call it again."
            ),
            parameters=schema,
        )

    # -- judging answers ---------------------------------------------------------------------

    def _validate_text(self, text: str) -> Any:
        if self._validator is None:
            output_type = self.request.output_type
            if output_type is None:
                raise ForeError("a structured run needs its output_type (in-process)")
            self._validator = (
                wrapper_model(output_type) if self.wrapped else adapter_for(output_type)
            )
        validator = self._validator
        if isinstance(validator, TypeAdapter):
            return validator.validate_json(text)
        return getattr(validator.model_validate_json(text), RESULT_KEY)

    def _judge(self, text: str) -> tuple[Any, str | None]:
        """``(value, None)`` or ``(None, errors)``; never raises for a bad answer.

        A validator of the output type that fails with something else than
        ``ValueError`` / ``AssertionError`` (a bug, e.g. a ``KeyError``) is a
        failed answer too -- it must not take the session's worker down.
        """
        try:
            return self._validate_text(text), None
        except ValidationError as exc:
            return None, compact_errors(exc)
        except ForeError:
            raise
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            return None, f"- (the value): the output type's validation raised {message}"

    def check_text(self, text: str) -> str | None:
        """Judge a text answer: ``None`` when it validated (``value`` is set), else the errors.

        A JSON answer wrapped in a Markdown code fence is accepted too (models
        without enforced decoding often add one).
        """
        value, errors = self._judge(text)
        if errors is not None:
            inner = _strip_fence(text)
            if inner is None:
                return errors
            value, fenced_errors = self._judge(inner)
            if fenced_errors is not None:
                return errors
        self.value, self.done = value, True
        return None

    def check_arguments(self, arguments: dict[str, Any]) -> str | None:
        """Judge a final-answer call's arguments (as JSON, like a text answer)."""
        value, errors = self._judge(json.dumps(arguments, ensure_ascii=False))
        if errors is None:
            self.value, self.done = value, True
        return errors

    def failed(self, errors: str) -> bool:
        """Count a failed answer; ``True`` while a re-ask is still allowed."""
        self.failures += 1
        self.last_errors = errors
        if self.failures > self.request.max_retries:
            self.gave_up = True
            return False
        return True

    # -- what the model is told back ---------------------------------------------------------

    def reask_text(self, errors: str) -> str:
        left = self.request.max_retries - self.failures + 1
        return (
            "Your answer did not match the required output format:\n"
            f"{errors}\n"
            "Answer again with only the JSON value, matching the schema exactly "
            f"({left} attempt{'' if left == 1 else 's'} left)."
        )

    def tool_error_text(self, errors: str) -> str:
        if self.gave_up:
            return f"Error: the final answer did not validate (no attempts left):\n{errors}"
        return (
            f"Error: the final answer did not validate:\n{errors}\n"
            f"Call {self.tool_name} again with corrected arguments."
        )

    def tool_reminder(self) -> str:
        return (
            f"When you have the answer, give it by calling the {self.tool_name} tool: its "
            "arguments are your final answer. Do not answer in plain text."
        )

    # -- the outcome -------------------------------------------------------------------------

    def outcome(self, status: RunStatus, error: str | None) -> tuple[Any, str | None]:
        """``(output, output_error)`` for the ``TurnResult`` of a run that ended ``status``."""
        if status == "paused":
            return None, None  # not over yet
        if self.done:
            return self.value, None
        if self.gave_up:
            tries = self.failures
            return None, (
                f"no valid output after {tries} answer{'' if tries == 1 else 's'} "
                f"(max_output_retries={self.request.max_retries}); the last errors:\n"
                f"{self.last_errors}"
            )
        why = f"the run ended {status}" + (f" ({error})" if error else "")
        if self.last_errors is not None:
            why += f"; the last answer's errors:\n{self.last_errors}"
        return None, f"no valid output: {why}"
