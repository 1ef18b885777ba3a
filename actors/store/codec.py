"""Pure encoding rules of the session store: items, configs, ids, bounds.

Everything here is plain code with no database, shared by every backend, so
the rules are the same whatever the store and are unit-tested on their own:

* **Items** are stored as the exact text of ``item.model_dump_json()`` and read
  back with one ``validate_json`` of the whole history (a JSON array built from
  the stored texts -- one call into pydantic-core instead of one per item), so
  a history round-trips byte for byte.
* **Configs** (``model_settings``, ``session_config``) are JSON objects that
  must not carry a credential: a key that names one (``api_key``,
  ``Authorization``, ``*_token``, ``password`` ...) or a URL with a password in
  it is refused, as are NaN and infinities (JSON has none).
* **Bounds**: ids, labels, titles, items, batches and configs all have a size
  limit, checked before any database work, so a hostile caller gets one clear
  :class:`~actors.store.errors.InvalidRecord` instead of a huge transaction.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import uuid_utils
from pydantic import JsonValue, TypeAdapter, ValidationError

from fore.actors.blobs.summary import BLOB_REF_RE
from fore.actors.store.errors import InvalidRecord, StoreCorrupted
from fore.messages.alerts import Alert
from fore.messages.conversation import Item, UserMessage

MAX_ID_CHARS = 200
MAX_TEXT_FIELD_CHARS = 4_096
"""Workspace paths, model names, titles."""
MAX_CONFIG_CHARS = 64 * 1024
MAX_BATCH_ITEMS = 10_000
MAX_ITEM_CHARS = 16 * 1024 * 1024
MAX_BATCH_CHARS = 64 * 1024 * 1024
MAX_BATCH_ALERTS = 100
MAX_KEPT_ALERTS = 200
"""Alerts kept per session (the oldest are dropped), like the alert sink's bound."""
MAX_PENDING_ACTIONS = 100
MAX_LABEL_CHARS = 1_000
TITLE_CHARS = 100
"""A title derived from the first user message is cut to this many characters."""
MAX_LIST_LIMIT = 1_000

_ITEMS = TypeAdapter(list[Item])
_ITEM: TypeAdapter[Any] = TypeAdapter(Item)
_ALERTS = TypeAdapter(list[Alert])
_CONFIG = TypeAdapter(dict[str, JsonValue])

_SECRET_PARTS = (
    "apikey",
    "secret",
    "password",
    "passwd",
    "authorization",
    "credential",
    "privatekey",
    "accesskey",
    "cookie",
    "bearer",
)


# -- ids and short text fields ------------------------------------------------------------------


def new_session_id() -> str:
    """A fresh session id: a time-ordered UUIDv7, as 32 hex digits."""
    return uuid.UUID(bytes=uuid_utils.uuid7().bytes).hex


def check_text(
    field: str, value: str, max_chars: int = MAX_TEXT_FIELD_CHARS, *, nul: bool = False
) -> str:
    """``value`` if it is short enough and writable as UTF-8 (no lone surrogates).

    NUL is refused unless ``nul`` (a text stored inside JSON, where it is escaped):
    a PostgreSQL text column cannot hold it.
    """
    if len(value) > max_chars:
        raise InvalidRecord(f"{field} is longer than {max_chars} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRecord(f"{field} is not valid Unicode (a lone surrogate)") from None
    if not nul and "\x00" in value:
        raise InvalidRecord(f"{field} contains a NUL character")
    return value


def check_session_id(session_id: object) -> str:
    """A session id: a non-empty string of at most 200 printable characters."""
    if not isinstance(session_id, str):
        raise InvalidRecord(f"a session id must be a str, not {type(session_id).__name__}")
    if not session_id:
        raise InvalidRecord("a session id must not be empty")
    check_text("the session id", session_id, MAX_ID_CHARS)
    if not session_id.isprintable():
        raise InvalidRecord(f"the session id {session_id[:40]!r} has control characters")
    return session_id


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidRecord(f"limit must be an int from 1 to {MAX_LIST_LIMIT}")
    return limit


# -- configs ---------------------------------------------------------------------------------


def _secret_key(key: str) -> bool:
    norm = re.sub(r"[^a-z0-9]", "", key.lower())
    return norm.endswith("token") or any(part in norm for part in _SECRET_PARTS)


def _secret_value(value: str) -> bool:
    if value[:7].lower() == "bearer ":
        return True
    if "://" in value and "@" in value:
        try:
            return urlsplit(value.strip()).password is not None
        except ValueError:
            return False
    return False


def _find_secret(value: Any, path: str) -> str | None:
    """Where in ``value`` a credential seems to sit (``None`` if nowhere)."""
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}"
            if _secret_key(str(key)):
                return here
            found = _find_secret(item, here)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_secret(item, f"{path}[{index}]")
            if found is not None:
                return found
    elif isinstance(value, str) and _secret_value(value):
        return path
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidRecord(f"{path} is not a finite number (JSON has no NaN or Infinity)")
    return None


def encode_config(field: str, value: dict[str, JsonValue]) -> str:
    """The stored JSON text of a config object, after the credential and size checks."""
    found = _find_secret(value, field)
    if found is not None:
        raise InvalidRecord(
            f"{found} looks like a credential; the store never keeps secrets (pass keys "
            f"through the environment, not the session's config)"
        )
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"{field} is not JSON: {exc}") from None
    check_text(field, text, MAX_CONFIG_CHARS)
    return text


def decode_config(field: str, text: str) -> dict[str, JsonValue]:
    try:
        return _CONFIG.validate_json(text)
    except ValidationError as exc:
        raise StoreCorrupted(
            f"a stored {field} is not a JSON object: {_first_error(exc)}"
        ) from None


# -- items -------------------------------------------------------------------------------------


def encode_items(items: Sequence[Any]) -> list[str]:
    """Each item's ``model_dump_json()`` text, checked against the batch bounds."""
    if len(items) > MAX_BATCH_ITEMS:
        raise InvalidRecord(f"a batch holds at most {MAX_BATCH_ITEMS} items, not {len(items)}")
    bodies: list[str] = []
    total = 0
    for index, item in enumerate(items):
        try:
            body = _ITEM.validate_python(item).model_dump_json(warnings="error")
            # What is stored must load back as the very same text, or a resume would fail
            # on it later (a model_construct'ed item with a field of the wrong type...).
            if _ITEM.validate_json(body).model_dump_json() != body:
                raise ValueError("it does not read back as the same JSON")
        except (ValidationError, ValueError, TypeError) as exc:
            raise InvalidRecord(
                f"item {index} cannot be stored as JSON: {_one_line(exc)}"
            ) from None
        if len(body) > MAX_ITEM_CHARS:
            raise InvalidRecord(f"item {index} is larger than {MAX_ITEM_CHARS} characters as JSON")
        total += len(body)
        if total > MAX_BATCH_CHARS:
            raise InvalidRecord(f"the batch is larger than {MAX_BATCH_CHARS} characters as JSON")
        bodies.append(body)
    return bodies


def decode_items(session_id: str, bodies: Sequence[str]) -> tuple[Item, ...]:
    """The items of stored texts, in order; a damaged row is named by its position."""
    try:
        items = tuple(_ITEMS.validate_json("[" + ",".join(bodies) + "]"))
    except ValidationError:
        pass
    else:
        if len(items) == len(bodies):  # a damaged row cannot pass as two items
            return items
    for seq, body in enumerate(bodies):  # the slow path only to name the bad row
        try:
            _ITEM.validate_json(body)
        except ValidationError as exc:
            raise StoreCorrupted(
                f"session {session_id!r}: stored item {seq} is damaged: {_first_error(exc)}"
            ) from None
    raise StoreCorrupted(f"session {session_id!r}: the stored items do not form a history")


def title_preview(items: Iterable[Any]) -> str:
    """A one-line title from the first user message: whitespace folded, cut to 100 chars."""
    for item in items:
        if isinstance(item, UserMessage):
            # Control characters (NUL included: PostgreSQL text cannot hold it) become spaces.
            printable = "".join(c if c.isprintable() else " " for c in item.text[: 4 * TITLE_CHARS])
            text = " ".join(printable.split())
            if text:
                return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"
    return ""


def blob_refs(bodies: Iterable[str], first_seq: int = 0) -> dict[str, int]:
    """Every ``[blob:<id>]`` quoted anywhere in the items -> the seq that first quotes it.

    The stored JSON text is scanned (a reference is plain ASCII, which JSON
    never escapes), so a reference in a tool call's arguments or a user's
    segment counts too: the store errs on the side of keeping blobs.
    """
    found: dict[str, int] = {}
    for offset, body in enumerate(bodies):
        for match in BLOB_REF_RE.finditer(body):
            found.setdefault(str(uuid.UUID(match.group(1))), first_seq + offset)
    return found


# -- alerts and pending actions ---------------------------------------------------------------


def encode_alerts(alerts: Sequence[Alert]) -> list[str]:
    if len(alerts) > MAX_BATCH_ALERTS:
        raise InvalidRecord(f"a batch holds at most {MAX_BATCH_ALERTS} alerts")
    out: list[str] = []
    for index, alert in enumerate(alerts):
        try:
            body = alert.model_dump_json(warnings="error")
            Alert.model_validate_json(body)
        except (ValueError, TypeError) as exc:
            raise InvalidRecord(
                f"alert {index} cannot be stored as JSON: {_one_line(exc)}"
            ) from None
        out.append(check_text(f"alert {index}", body, MAX_CONFIG_CHARS))
    return out


def decode_alerts(session_id: str, bodies: Sequence[str]) -> tuple[Alert, ...]:
    try:
        return tuple(_ALERTS.validate_json("[" + ",".join(bodies) + "]"))
    except ValidationError as exc:
        raise StoreCorrupted(
            f"session {session_id!r}: a stored alert is damaged: {_first_error(exc)}"
        ) from None


def encode_labels(labels: Sequence[str]) -> str:
    if len(labels) > MAX_PENDING_ACTIONS:
        raise InvalidRecord(f"at most {MAX_PENDING_ACTIONS} pending actions are kept")
    for index, label in enumerate(labels):
        check_text(f"pending action {index}", label, MAX_LABEL_CHARS, nul=True)
    return json.dumps(list(labels), ensure_ascii=False)


def decode_labels(session_id: str, text: str) -> tuple[str, ...]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise StoreCorrupted(f"session {session_id!r}: the stored pending actions are damaged")
    return tuple(value)


# -- messages ------------------------------------------------------------------------------------


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return _one_line(exc)
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "value"
    return f"{where}: {first.get('msg', 'invalid')}"


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return _first_error(exc)
    return " ".join(str(exc).split()) or type(exc).__name__
