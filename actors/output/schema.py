"""Output types as JSON schemas a provider accepts (pure functions).

A structured turn asks the model for a value of a Python type. What the model
is shown is that type's JSON schema, in one of two places: the provider's
JSON-schema response format, or the arguments of a ``final_answer`` tool. Both
need an *object* at the root (OpenAI refuses a response format whose root is
not ``type: object``, and tool arguments are always an object), so any other
type -- ``list[Item]``, ``int``, a union of models -- is wrapped as
``{"result": <value>}`` and unwrapped after validation.

Providers that enforce a schema while decoding (OpenAI's ``strict: true``)
accept only a subset of JSON Schema: every object lists all its properties as
``required`` and forbids ``additionalProperties``; ``$ref`` may not have
siblings. :func:`strict_schema` rewrites pydantic's schema into that form the
way OpenAI's own SDK does (``openai.lib._pydantic.to_strict_json_schema``), or
answers ``None`` when the type cannot be expressed strictly (a ``dict[str, X]``
field, whose keys are open): the format is then sent non-strict, and the
answer is still validated here.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, TypeAdapter, create_model
from pydantic.errors import PydanticUserError

from fore.errors import OutputTypeError

__all__ = [
    "RESULT_KEY",
    "OutputTypeError",
    "adapter_for",
    "is_object_schema",
    "schema_name",
    "strict_schema",
    "wire_schema",
]

RESULT_KEY = "result"
"""The property a non-object output is wrapped in."""

_NAME_OK = re.compile(r"[^A-Za-z0-9_-]+")


def schema_name(output_type: Any) -> str:
    """A name for the schema (OpenAI's rule: ``^[A-Za-z0-9_-]{1,64}$``)."""
    raw = getattr(output_type, "__name__", None) or type(output_type).__name__ or "Output"
    name = _NAME_OK.sub("_", str(raw)).strip("_")[:64]
    return name or "Output"


def _build_adapter(output_type: Any) -> TypeAdapter[Any]:
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        adapter.json_schema()
    except (PydanticUserError, TypeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise OutputTypeError(
            f"output_type {output_type!r} cannot be used for structured output: {first}"
        ) from None
    return adapter


@functools.lru_cache(maxsize=256)
def _cached_adapter(output_type: Any) -> TypeAdapter[Any]:
    return _build_adapter(output_type)


def adapter_for(output_type: Any) -> TypeAdapter[Any]:
    """``TypeAdapter(output_type)``, built once per type (building one costs milliseconds).

    Raises :class:`OutputTypeError` with one line naming the type when
    pydantic cannot validate it or cannot give its JSON schema.
    """
    try:
        return _cached_adapter(output_type)
    except TypeError as exc:  # unhashable (e.g. an Annotated with a dict): build each time
        if isinstance(exc, OutputTypeError):
            raise
        return _build_adapter(output_type)


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` with a local ``$ref`` (``#/$defs/X``) followed, else itself."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            if not isinstance(node, Mapping) or part not in node:
                return schema
            node = node[part]
        if isinstance(node, Mapping):
            return node
    return schema


def is_object_schema(schema: Mapping[str, Any]) -> bool:
    """Whether the root of ``schema`` is an object (so it needs no wrapping)."""
    return _resolve(schema, schema).get("type") == "object"


def wire_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``(schema with an object at its root, whether it was wrapped)``.

    A wrapped schema keeps ``$defs`` at its root, where the ``#/$defs/...``
    references of the inner schema point.
    """
    if is_object_schema(schema):
        return dict(schema), False
    inner = {k: v for k, v in schema.items() if k != "$defs"}
    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {RESULT_KEY: inner},
        "required": [RESULT_KEY],
    }
    if "$defs" in schema:
        wrapped["$defs"] = schema["$defs"]
    return wrapped, True


class _NotStrict(Exception):
    """The schema has a part strict mode cannot express."""


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` in the strict subset providers enforce, or ``None`` if it has none.

    Every object gets ``additionalProperties: false`` and all its properties
    ``required`` (an optional field stays optional in its *type* -- pydantic
    gives ``X | None`` an ``anyOf`` with ``null`` -- but must be present);
    ``default: null`` is dropped; a ``$ref`` with sibling keywords is inlined;
    a one-element ``allOf`` is merged into its parent. An object whose extra
    keys are open (``dict[str, X]``: ``additionalProperties`` is a schema)
    cannot be strict: ``None``.
    """
    root = copy.deepcopy(dict(schema))
    try:
        strict: dict[str, Any] = _strict(root, root)
    except _NotStrict:
        return None
    return strict


def _strict(node: Any, root: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_strict(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node and len(node) > 1:
        target = _resolve({"$ref": node["$ref"]}, root)
        if target is node or "$ref" in target:
            raise _NotStrict
        merged = {**copy.deepcopy(dict(target)), **{k: v for k, v in node.items() if k != "$ref"}}
        return _strict(merged, root)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        rest = {k: v for k, v in node.items() if k != "allOf"}
        return _strict({**all_of[0], **rest}, root)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: _strict(sub, root) for name, sub in value.items()}
        elif key == "default" and value is None:
            continue
        else:
            out[key] = _strict(value, root)
    if out.get("type") == "object" or "properties" in out:
        extra = out.get("additionalProperties")
        if extra not in (None, False):
            raise _NotStrict  # open keys (dict[str, X]) cannot be all "required"
        out["additionalProperties"] = False
        out["required"] = list(out.get("properties", {}))
        out.setdefault("properties", {})
    return out


def wrapper_model(output_type: Any) -> type[BaseModel]:
    """A model ``{"result": output_type}``: validates a wrapped answer, errors under ``result``."""
    return create_model(  # type: ignore[no-any-return, call-overload]
        "StructuredOutput", **{RESULT_KEY: (output_type, ...)}
    )
