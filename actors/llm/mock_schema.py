"""JSON-schema response formats as a real server treats them (the mock server's part).

``response_format: {"type": "json_schema", "json_schema": {"name", "schema",
"strict"}}`` is OpenAI's structured-output request; vLLM and llama.cpp's
server accept the same shape and enforce the schema while decoding. The mock
(:mod:`actors.llm.mock_server`) must refuse what OpenAI refuses and answer
what such a server answers, so a client that passes against it passes there:

* :func:`response_format_problem` -- OpenAI's 400s: a missing or badly named
  ``json_schema``, a schema that is not a valid JSON Schema, and with
  ``strict: true`` its structured-output rules (the root is an object; every
  object forbids ``additionalProperties`` and lists every property in
  ``required``), worded as OpenAI words them;
* :func:`conform` -- the answer's text: a scripted text that already matches
  the schema is served as it is; any other text is replaced by a minimal
  instance of the schema (:func:`instance`), as constrained decoding can only
  produce matching JSON. What a schema cannot say (a pydantic validator's own
  rule) is left to the client's validation -- which is what re-asks are for.

Validation uses the ``jsonschema`` package ($ref, $defs, anyOf, formats).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from fore.actors.llm.codec import dumps

__all__ = ["conform", "instance", "matches", "response_format_problem", "strict_problem"]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_MAX_DEPTH = 24
"""Deeper than this, :func:`instance` takes a ``null`` / empty branch (recursive schemas)."""


def response_format_problem(fmt: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(message, param)`` of OpenAI's 400 for a ``json_schema`` response format, or None."""
    spec = fmt.get("json_schema")
    if not isinstance(spec, Mapping):
        return (
            "Missing required parameter: 'response_format.json_schema'.",
            "response_format.json_schema",
        )
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        return (
            "Invalid 'response_format.json_schema.name': string does not match pattern. "
            "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' (at most 64).",
            "response_format.json_schema.name",
        )
    schema = spec.get("schema", {})
    if not isinstance(schema, Mapping):
        return (
            "Invalid type for 'response_format.json_schema.schema': expected an object.",
            "response_format.json_schema.schema",
        )
    strict = spec.get("strict", False)
    if strict is not None and not isinstance(strict, bool):
        return (
            "Invalid type for 'response_format.json_schema.strict': expected a boolean.",
            "response_format.json_schema.strict",
        )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return (
            f"Invalid schema for response_format '{name}': {exc.message}",
            "response_format",
        )
    if strict:
        problem = strict_problem(schema)
        if problem is not None:
            return f"Invalid schema for response_format '{name}': {problem}", "response_format"
    return None


def _context(path: tuple[str, ...]) -> str:
    return "(" + ", ".join(repr(p) for p in path) + ("," if len(path) == 1 else "") + ")"


def strict_problem(schema: Mapping[str, Any]) -> str | None:
    """What OpenAI's strict structured outputs refuse in ``schema`` (one line), or None."""
    if schema.get("type") != "object":
        got = schema.get("type", "anyOf" if "anyOf" in schema else None)
        return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{got}\"'."
    return _walk(schema, ())


def _walk(node: Any, path: tuple[str, ...]) -> str | None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            found = _walk(item, (*path, str(i)))
            if found is not None:
                return found
        return None
    if not isinstance(node, Mapping):
        return None
    if node.get("type") == "object" or "properties" in node:
        where = f"In context={_context(path)}, "
        if node.get("additionalProperties") is not False:
            return where + "'additionalProperties' is required to be supplied and to be false."
        properties = node.get("properties", {})
        required = node.get("required")
        listed = required if isinstance(required, list) else []
        missing = [key for key in properties if key not in listed]
        if missing:
            return (
                where + "'required' is required to be supplied and to be an array including "
                f"every key in properties. Missing '{missing[0]}'."
            )
    for key in ("properties", "$defs", "definitions"):
        children = node.get(key)
        if isinstance(children, Mapping):
            for name, child in children.items():
                found = _walk(child, (*path, key, str(name)))
                if found is not None:
                    return found
    for key in ("items", "anyOf", "allOf", "oneOf", "prefixItems"):
        if key in node:
            found = _walk(node[key], (*path, key))
            if found is not None:
                return found
    return None


def matches(text: str, schema: Mapping[str, Any]) -> bool:
    """Whether ``text`` is JSON that validates against ``schema``."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return bool(Draft202012Validator(schema).is_valid(value))


def conform(text: str, schema: Mapping[str, Any]) -> str:
    """The answer a schema-enforcing server gives: ``text`` if it matches, else an instance."""
    if matches(text, schema):
        return text
    return dumps(instance(schema))


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return node
    target: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(target, Mapping) or part not in target:
            return {}
        target = target[part]
    if not isinstance(target, Mapping):
        return {}
    rest = {k: v for k, v in node.items() if k != "$ref"}
    return {**target, **rest}


def instance(schema: Mapping[str, Any]) -> Any:
    """A small value that validates against ``schema`` (the first choice of each branch)."""
    return _instance(schema, schema, 0)


_FORMATS = {
    "date-time": "1970-01-01T00:00:00Z",
    "date": "1970-01-01",
    "time": "00:00:00",
    "uuid": "00000000-0000-0000-0000-000000000000",
    "email": "user@example.com",
    "uri": "https://example.com/",
}


def _instance(node: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> Any:
    node = _resolve(node, root)
    if "const" in node:
        return node["const"]
    enum = node.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list) and options:
            non_null = [o for o in options if isinstance(o, Mapping) and o.get("type") != "null"]
            nulls = [o for o in options if isinstance(o, Mapping) and o.get("type") == "null"]
            pick = nulls[0] if nulls and (depth > _MAX_DEPTH or not non_null) else non_null[0]
            return _instance(pick, root, depth + 1)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and all_of:
        merged: dict[str, Any] = {}
        for part in all_of:
            if isinstance(part, Mapping):
                merged.update(_resolve(part, root))
        merged.update({k: v for k, v in node.items() if k != "allOf"})
        return _instance(merged, root, depth + 1)
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in node:
        kind = "object"
    if kind == "object":
        properties = node.get("properties", {})
        required = node.get("required", [])
        return {
            key: _instance(properties.get(key, {}), root, depth + 1)
            for key in required
            if isinstance(key, str)
        }
    if kind == "array":
        prefix = node.get("prefixItems")
        if isinstance(prefix, list):
            return [_instance(p, root, depth + 1) for p in prefix if isinstance(p, Mapping)]
        count = int(node.get("minItems", 0)) if depth <= _MAX_DEPTH else 0
        items = node.get("items", {})
        return [_instance(items, root, depth + 1) for _ in range(count)]
    if kind == "string":
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt in _FORMATS:
            return _FORMATS[fmt]
        return "x" * int(node.get("minLength", 0))
    if kind in ("integer", "number"):
        low = node.get("minimum")
        if low is None and node.get("exclusiveMinimum") is not None:
            low = node["exclusiveMinimum"] + 1
        value = low if low is not None else 0
        high = node.get("maximum")
        if high is not None and value > high:
            value = high
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    return None
