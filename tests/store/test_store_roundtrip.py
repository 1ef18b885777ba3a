"""Hypothesis: any sequence of items round-trips through both stores unchanged, byte for byte.

Histories are drawn from the real ``messages.conversation`` models (every item
kind, any Unicode a JSON text can carry -- control characters, NUL, emoji,
huge and negative numbers, nested tool arguments), written in random turn
batches, and read back through a second store object (a different connection,
so nothing can come from a cache). Forks of any number of turns must be the
matching prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fore.actors.store import NewSession, SessionStore, TurnBatch, open_store
from fore.actors.store.pgtemp import PgCluster
from fore.messages.conversation import (
    AssistantMessage,
    FileRef,
    Paste,
    SystemMessage,
    TextSegment,
    ToolCall,
    ToolResult,
    UserMessage,
)
from tests.store.pg_server import new_database, pg_cluster  # noqa: F401  (fixture)

# Any text model_dump_json can write: every code point but lone surrogates.
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
nonempty = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
segments = st.one_of(
    st.builds(TextSegment, text=text),
    st.builds(FileRef, path=nonempty),
    st.builds(Paste, text=text),
)
tool_calls = st.builds(
    ToolCall,
    id=nonempty,
    name=nonempty,
    arguments=st.dictionaries(text, json_values, max_size=4),
)
items = st.one_of(
    st.builds(UserMessage, text=text, segments=st.lists(segments, max_size=3).map(tuple)),
    st.builds(AssistantMessage, text=text, tool_calls=st.lists(tool_calls, max_size=3).map(tuple)),
    st.builds(SystemMessage, text=text),
    st.builds(ToolResult, call_id=nonempty, name=text, output=text, is_error=st.booleans()),
)
histories = st.lists(st.lists(items, min_size=1, max_size=6), min_size=0, max_size=6)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def two_stores(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SessionStore, SessionStore]]:
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path_factory.mktemp('roundtrip')}/sessions.db"
    else:
        cluster: PgCluster = request.getfixturevalue("pg_cluster")
        url = new_database(cluster)
    writer = open_store(url)
    reader = open_store(url)
    try:
        yield writer, reader
    finally:
        writer.close()
        reader.close()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories, fork_at=st.integers(min_value=0, max_value=7))
def test_any_history_round_trips_byte_for_byte(
    two_stores: tuple[SessionStore, SessionStore], history: list[list[Any]], fork_at: int
) -> None:
    writer, reader = two_stores
    sid = writer.create_session(NewSession(workspace="/w", model_name="m")).session_id
    for batch in history:
        writer.append(sid, TurnBatch(items=tuple(batch)))
    flat = [item for batch in history for item in batch]

    loaded = reader.load(sid).items
    assert [i.model_dump_json() for i in loaded] == [i.model_dump_json() for i in flat]
    assert list(loaded) == flat
    assert [type(i) for i in loaded] == [type(i) for i in flat]

    fork = writer.fork(sid, turns=fork_at)
    kept = [item for batch in history[:fork_at] for item in batch]
    assert [i.model_dump_json() for i in reader.load(fork.session_id).items] == [
        i.model_dump_json() for i in kept
    ]
    writer.delete(fork.session_id)
    writer.release(sid)
