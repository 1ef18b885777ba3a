"""Structured output: ``session.submit(text, output_type=Model)`` ends with a validated value.

:mod:`~actors.output.schema` turns the type into the JSON schema a provider
accepts; :mod:`~actors.output.contract` judges answers and words what the
model is told back; :mod:`~actors.output.interceptor` asks for the value
(the provider's JSON-schema response format, or a ``final_answer`` tool) and
re-asks, bounded, when an answer does not validate.
"""

from fore.actors.output.contract import (
    DEFAULT_MAX_OUTPUT_RETRIES,
    FINAL_ANSWER,
    OutputRun,
    OutputValidationError,
    Strategy,
    compact_errors,
    output_request,
)
from fore.actors.output.interceptor import (
    OutputInterceptor,
    StructuredOutputUnavailable,
    model_strategy,
    start_output,
)
from fore.actors.output.schema import OutputTypeError, adapter_for, strict_schema, wire_schema

__all__ = [
    "DEFAULT_MAX_OUTPUT_RETRIES",
    "FINAL_ANSWER",
    "OutputInterceptor",
    "OutputRun",
    "OutputTypeError",
    "OutputValidationError",
    "Strategy",
    "StructuredOutputUnavailable",
    "adapter_for",
    "compact_errors",
    "model_strategy",
    "output_request",
    "start_output",
    "strict_schema",
    "wire_schema",
]
