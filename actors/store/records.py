"""What goes into and comes out of a session store: frozen, validated records.

These are plain data (frozen pydantic models like every Fore message), so the
runtime can hand them between actors as they are. ``model_settings`` and
``session_config`` are JSON objects the store keeps verbatim: enough to rebuild
the session (an OpenAI-compatible endpoint's ``base_url`` and model name, the
session's settings) and never a credential -- the store refuses keys that name
one (see :func:`actors.store.codec.check_config`).
"""

from __future__ import annotations

from pydantic import Field, JsonValue

from fore.messages.alerts import Alert
from fore.messages.base import Message
from fore.messages.conversation import Item
from fore.messages.llm import Usage


class NewSession(Message):
    """A session to create. ``session_id=None`` lets the store pick one (a UUIDv7 hex)."""

    session_id: str | None = None
    workspace: str
    model_name: str
    model_settings: dict[str, JsonValue] = Field(default_factory=dict)
    session_config: dict[str, JsonValue] = Field(default_factory=dict)
    title: str = ""


class SessionRecord(Message):
    """A session's metadata as stored.

    ``item_count`` is the next sequence number (items are numbered 0, 1, ...
    without gaps); ``turn_count`` counts the appended batches that carried
    items. ``parent_id``/``forked_at`` say which session and how many items it
    was forked from (the fork owns a full copy: the parent may be deleted).
    """

    session_id: str
    workspace: str
    model_name: str
    model_settings: dict[str, JsonValue]
    session_config: dict[str, JsonValue]
    title: str
    parent_id: str | None = None
    forked_at: int | None = None
    created_at: float
    updated_at: float
    item_count: int
    turn_count: int


class SessionSummary(Message):
    """One line of :meth:`SessionStore.list_sessions` (most recently updated first).

    ``leased_by`` names the process that has the session open (``None`` when
    nobody does, or its lease expired).
    """

    session_id: str
    title: str
    workspace: str
    model_name: str
    created_at: float
    updated_at: float
    item_count: int
    turn_count: int
    parent_id: str | None = None
    leased_by: str | None = None


class SessionSnapshot(Message):
    """Everything the store keeps for one session, read in one consistent transaction.

    ``pending_actions`` are the labels of staged actions that were waiting
    (their callbacks lived in the process and are gone); ``blob_refs`` the ids
    of the blobs its history quotes as ``[blob:<id>]`` (the bytes stay in the
    blob store); ``alerts`` the most recent ones (the store keeps a bounded
    number per session).
    """

    record: SessionRecord
    items: tuple[Item, ...]
    pending_actions: tuple[str, ...] = ()
    alerts: tuple[Alert, ...] = ()
    usage: Usage = Usage()
    blob_refs: tuple[str, ...] = ()


class TurnBatch(Message):
    """What one turn adds to a session, written all or nothing.

    ``items`` are appended in order after the session's last item. ``usage``
    is the turn's token usage, added to the session's total. ``alerts`` are
    appended to the session's kept alerts. ``pending_actions`` replaces the
    kept labels when given (``None`` leaves them as they are). A batch with no
    items (alerts or usage only) does not count as a turn.
    """

    items: tuple[Item, ...] = ()
    usage: Usage | None = None
    alerts: tuple[Alert, ...] = ()
    pending_actions: tuple[str, ...] | None = None


class Appended(Message):
    """Where a batch landed: its items are ``first_seq .. next_seq - 1`` of turn ``turn``.

    ``turn`` is ``None`` for a batch without items.
    """

    session_id: str
    first_seq: int
    next_seq: int
    turn: int | None
