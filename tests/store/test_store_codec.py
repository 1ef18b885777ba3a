"""The store's pure rules: URLs, redaction, credential checks, titles, owners, damaged rows."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.actors.store import InvalidRecord, NewSession, StoreCorrupted, TurnBatch, open_store
from fore.actors.store.codec import TITLE_CHARS, blob_refs, encode_config, title_preview
from fore.actors.store.owner import certainly_dead, describe, parse_owner, this_process
from fore.actors.store.url import PostgresTarget, SqliteTarget, parse_store_url, redact
from fore.messages.alerts import Alert
from fore.messages.conversation import AssistantMessage, UserMessage

ALERT = Alert(level="info", text="x", source="test")

path_text = st.text(  # one path component: no "/", no control characters
    st.characters(exclude_categories=("Cs", "Cc"), exclude_characters="/"), min_size=1
)


@given(st.lists(path_text, min_size=1, max_size=4))
def test_sqlite_urls_name_exactly_their_path(parts: list[str]) -> None:
    path = "/" + "/".join(parts)
    target = parse_store_url("sqlite://" + quote(path))
    assert isinstance(target, SqliteTarget)
    assert str(target.path) == str(Path(path))


def test_relative_sqlite_paths() -> None:
    target = parse_store_url("sqlite:data/sessions.db")
    assert isinstance(target, SqliteTarget) and str(target.path) == "data/sessions.db"


@given(st.text(st.characters(codec="ascii", exclude_categories=("Cc",)), min_size=1))
def test_redaction_never_shows_a_password(password: str) -> None:
    secret = quote(password, safe="")
    in_userinfo = redact(f"postgresql://user:{secret}@db.internal:5432/fore")
    assert urlsplit(in_userinfo).password == "***"
    assert urlsplit(in_userinfo).hostname == "db.internal"
    in_query = redact(f"postgresql:///fore?host=/run&password={secret}")
    assert parse_qs(urlsplit(in_query).query)["password"] == ["***"]
    url = f"postgresql://user:{secret}@db/fore"
    target = parse_store_url(url)
    assert isinstance(target, PostgresTarget) and target.conninfo == url
    assert urlsplit(target.shown).password == "***"


@pytest.mark.parametrize(
    "settings",
    [
        {"base_url": "http://127.0.0.1:8000/v1", "model": "m"},
        {"max_tokens": 4096, "tokens_per_minute": 10, "tokenizer": "cl100k"},
        {"headers": {"X-Trace": "1"}, "temperature": 0.2},
        {"base_url": "https://user@example.invalid/v1"},  # a user, no password
    ],
)
def test_ordinary_model_settings_are_kept(settings: dict[str, object]) -> None:
    encode_config("model_settings", settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "settings",
    [
        {"api_key": "x"},
        {"apiKey": "x"},
        {"OPENAI_API_KEY": "x"},
        {"token": "x"},
        {"access_token": "x"},
        {"client_secret": "x"},
        {"password": "x"},
        {"headers": {"authorization": "x"}},
        {"headers": {"Cookie": "x"}},
        {"list": [{"private_key": "x"}]},
        {"url": "postgresql://u:pw@h/db"},
        {"h": "bearer abc"},
        {"x": float("inf")},
    ],
)
def test_credentials_are_refused_with_where(settings: dict[str, object]) -> None:
    with pytest.raises(InvalidRecord, match="model_settings"):
        encode_config("model_settings", settings)  # type: ignore[arg-type]


def test_titles_are_one_printable_line() -> None:
    assert title_preview(
        [AssistantMessage(text="a"), UserMessage(text=" \n fix\x00the\tbug \n")]
    ) == ("fix the bug")
    long = title_preview([UserMessage(text="word " * 100)])
    assert len(long) == TITLE_CHARS and long.endswith("…")
    assert title_preview([AssistantMessage(text="no user")]) == ""


def test_blob_references_anywhere_in_an_item() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    bodies = [
        UserMessage(text=f"look at [blob:{a}]").model_dump_json(),
        AssistantMessage(text=f"[blob:{str(b).upper()}] and [blob:{a}]").model_dump_json(),
    ]
    assert blob_refs(bodies, 10) == {str(a): 10, str(b): 11}


def test_owner_ids_and_liveness() -> None:
    me = this_process()
    assert parse_owner(str(me)) == me
    assert describe(str(me)).startswith("pid ")
    assert not certainly_dead(str(me))
    assert not certainly_dead("some-other-host/worker-1")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from actors.store.owner import this_process; print(this_process())",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    gone = done.stdout.strip().splitlines()[-1]
    assert parse_owner(gone) is not None and certainly_dead(gone)
    other_machine = gone.split("/")
    other_machine[3] = "another-boot-1"
    assert not certainly_dead("/".join(other_machine))  # never judged from here


def test_a_damaged_row_is_named_not_crashed(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        sid = store.create_session(NewSession(workspace="/w", model_name="m")).session_id
        store.append(sid, TurnBatch(items=(UserMessage(text="a"), UserMessage(text="b"))))
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("UPDATE items SET body = ? WHERE seq = 1", ('{"kind": "alien"}',))
    conn.commit()
    with open_store(url) as store, pytest.raises(StoreCorrupted, match="stored item 1"):
        store.load(sid)
    # Two items smuggled into one row cannot pass as a history either.
    two = UserMessage(text="x").model_dump_json()
    conn.execute("UPDATE items SET body = ? WHERE seq = 1", (f"{two},{two}",))
    conn.commit()
    with open_store(url) as store, pytest.raises(StoreCorrupted, match="stored item 1"):
        store.load(sid)
    conn.execute("DELETE FROM items WHERE seq = 0")
    conn.commit()
    conn.close()
    with open_store(url) as store, pytest.raises(StoreCorrupted, match="1 stored items where 2"):
        store.load(sid)


@pytest.mark.parametrize(
    ("table", "column", "value", "call"),
    [
        ("sessions", "next_seq", "many", "load"),
        ("sessions", "created_at", "yesterday", "load"),
        ("sessions", "model_settings", "[1, 2]", "load"),
        ("sessions", "pending_actions", "{}", "load"),
        ("sessions", "updated_at", "soon", "list"),
        ("sessions", "turn_count", "some", "open"),
        ("sessions", "next_seq", "lots", "fork"),
        ("alerts", "body", "{}", "load"),
        ("schema_version", "version", -1, "open_store"),
    ],
)
def test_values_of_the_wrong_shape_are_corruption_not_a_crash(
    tmp_path: Path, table: str, column: str, value: object, call: str
) -> None:
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        sid = store.create_session(
            NewSession(session_id="s", workspace="/w", model_name="m")
        ).session_id
        store.append(sid, TurnBatch(items=(UserMessage(text="a"),), alerts=(ALERT,)))
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
    conn.commit()
    conn.close()
    if call == "open_store":
        with pytest.raises(StoreCorrupted):
            open_store(url)
        return
    with open_store(url) as store, pytest.raises(StoreCorrupted):
        if call == "load":
            store.load(sid)
        elif call == "list":
            store.list_sessions()
        elif call == "open":
            store.open_session(sid)
        else:
            store.fork(sid)


def test_an_item_that_would_not_read_back_is_refused(tmp_path: Path) -> None:
    with open_store(f"sqlite://{tmp_path}/s.db") as store:
        sid = store.create_session(NewSession(workspace="/w", model_name="m")).session_id
        bad = UserMessage.model_construct(text=5)  # bypasses validation: not a valid item
        batch = TurnBatch.model_construct(items=(UserMessage(text="ok"), bad))
        with pytest.raises(InvalidRecord, match="item 1"):
            store.append(sid, batch)
        assert store.load(sid).items == ()


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": float("nan")},
        {"timeout": 0},
        {"lease_ttl": float("inf")},
        {"lease_ttl": "30"},
        {"max_connections": 2.5},
        {"max_connections": 0},
        {"owner": 5},
        {"owner": ""},
    ],
)
def test_bad_store_options_are_refused(tmp_path: Path, options: dict[str, object]) -> None:
    with pytest.raises(InvalidRecord):
        open_store(f"sqlite://{tmp_path}/s.db", **options)  # type: ignore[arg-type]
