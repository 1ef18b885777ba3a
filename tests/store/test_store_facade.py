"""``fore.store``: the store's public names are the ones the runtime raises and returns."""

from __future__ import annotations

from pathlib import Path

import pytest

import fore.store
from fore import ForeError, Runtime
from fore.testing import ScriptedModel


def test_every_error_of_the_facade_is_a_fore_error() -> None:
    errors = [getattr(fore.store, n) for n in fore.store.__all__ if n[0].isupper()]
    for cls in errors:
        if isinstance(cls, type) and issubclass(cls, BaseException):
            assert issubclass(cls, ForeError), cls


def test_the_runtime_raises_and_returns_the_facades_types(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with Runtime(store=url) as rt:
        with pytest.raises(fore.store.SessionNotFound):
            rt.resume_session("no-such-session", model=ScriptedModel([]))
        with rt.open_session(workspace=workspace, model=ScriptedModel([{"text": "hi"}])) as s:
            assert s.submit("hello", timeout=30).status == "completed"
            sid = s.id
        (summary,) = rt.list_sessions()
    assert isinstance(summary, fore.store.SessionSummary)
    assert summary.session_id == sid


def test_a_bad_store_url_is_one_store_error(tmp_path: Path) -> None:
    with pytest.raises(fore.store.StoreError):
        Runtime(store="nosuchscheme://x")
