"""``fore run --session``, ``--store`` / ``--no-store`` / ``FORE_STORE``, ``fore chat --resume``.

The commands run as real subprocesses against real SQLite files and the mock
LLM server; the chat's resume is driven through its backend and its picker.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile, ScriptReply
from fore.actors.store import open_store
from fore.actors.worker.approval import ApprovalDecision
from fore.messages.gate import ApprovalMode
from fore.supervision import Runtime
from fore.supervision.chat.backend import BackendConfig, SessionBackend
from fore.supervision.chat.picker import pick_session, resumed_banner
from tests.cli.test_cli import assert_one_line_error, fore

SESSION_LINE = re.compile(r"\[session ([0-9a-f]+): continue it with --session \1\]")


def script_file(tmp_path: Path, *texts: str) -> Path:
    path = tmp_path / f"script-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps({"replies": [{"text": t} for t in texts]}))
    return path


def session_of(done: Any) -> str:
    match = SESSION_LINE.search(done.stdout)
    assert match, done.stdout
    return match.group(1)


def texts(url: str, sid: str) -> list[str]:
    with open_store(url, owner="reader") as store:
        return [str(getattr(i, "text", "")) for i in store.load(sid).items]


def test_run_keeps_the_session_and_session_continues_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    url = f"sqlite:///{tmp_path}/s.db"
    first = fore(
        "run", "--store", url, "--workspace", str(ws),
        "--script", str(script_file(tmp_path, "first answer")), "hello",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    sid = session_of(first)
    again = fore(
        "run", "--store", url, "--session", sid,
        "--script", str(script_file(tmp_path, "second answer")), "and again",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert session_of(again) == sid
    assert "second answer" in again.stdout
    assert texts(url, sid) == ["hello", "first answer", "and again", "second answer"]


def test_run_rebuilds_the_stored_endpoint_when_no_model_is_named(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    url = f"sqlite:///{tmp_path}/s.db"
    script = ScriptFile(replies=(ScriptReply(text="one"), ScriptReply(text="two")))
    with MockLlmServer(script) as server:
        first = fore(
            "run", "--store", url, "--workspace", str(ws), "--base-url", server.base_url,
            "--model", "mock-1", "--api-key", "k-1", "hi",
        )  # fmt: skip
        assert first.returncode == 0, first.stderr
        sid = session_of(first)
        # No --base-url, no --model, no environment: the stored endpoint; the key
        # comes from the environment, as always.
        again = fore("run", "--store", url, "--session", sid, "more", env={"FORE_API_KEY": "k-2"})
        assert again.returncode == 0, again.stderr
        requests = server.requests()
    assert "two" in again.stdout
    assert isinstance(requests[-1].body, dict) and requests[-1].body["model"] == "mock-1"
    assert requests[-1].headers["authorization"] == "Bearer k-2"
    assert [m["content"] for m in requests[-1].body["messages"]][-1] == "more"


def test_run_keeps_its_store_in_the_data_directory_by_default(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    data = tmp_path / "data"
    done = fore(
        "run", "--workspace", str(ws), "--script", str(script_file(tmp_path, "ok")), "hi",
        env={"XDG_DATA_HOME": str(data)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    db = data / "fore" / "sessions.db"
    assert db.is_file()
    assert texts(f"sqlite:///{db}", session_of(done)) == ["hi", "ok"]


def test_fore_store_names_the_store_and_no_store_keeps_none(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    data = tmp_path / "data"
    url = f"sqlite:///{tmp_path}/env.db"
    env = {"XDG_DATA_HOME": str(data), "FORE_STORE": url}
    done = fore(
        "run", "--workspace", str(ws), "--script", str(script_file(tmp_path, "ok")), "hi", env=env
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert texts(url, session_of(done)) == ["hi", "ok"]
    bare = fore(
        "run", "--no-store", "--workspace", str(ws),
        "--script", str(script_file(tmp_path, "ok")), "hi", env=env,
    )  # fmt: skip
    assert bare.returncode == 0, bare.stderr
    assert not SESSION_LINE.search(bare.stdout)
    assert not (data / "fore").exists()


def test_run_with_a_bad_store_or_session_is_one_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = str(script_file(tmp_path, "ok"))
    done = fore("run", "--store", "mysql://x/y", "--workspace", str(ws), "--script", script, "hi")
    assert_one_line_error(done, 2, "unknown store URL scheme")
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not a database" * 100)
    done = fore(
        "run", "--store", f"sqlite:///{broken}", "--workspace", str(ws), "--script", script, "hi"
    )  # fmt: skip
    assert_one_line_error(done, 1, "the session store")
    url = f"sqlite:///{tmp_path}/s.db"
    done = fore("run", "--store", url, "--session", "nope", "--script", script, "hi")
    assert_one_line_error(done, 2, "no session 'nope'")
    done = fore("run", "--no-store", "--session", "x", "--script", script, "hi")
    assert_one_line_error(done, 2, "needs a session store")


def test_run_session_of_an_in_process_model_without_a_model_is_one_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    url = f"sqlite:///{tmp_path}/s.db"
    first = fore(
        "run", "--store", url, "--workspace", str(ws),
        "--script", str(script_file(tmp_path, "a")), "hi",
    )  # fmt: skip
    sid = session_of(first)
    done = fore("run", "--store", url, "--session", sid, "more")
    assert_one_line_error(done, 2, "pass model=")


# -- fore chat --resume ----------------------------------------------------------------------------


def test_the_picker_lists_newest_first_and_takes_a_number() -> None:
    rows = [
        type("S", (), {"session_id": f"id{i}", "title": f"t{i}", "updated_at": 0.0,
                       "turn_count": i, "leased_by": None})()
        for i in range(3)
    ]  # fmt: skip
    shown: list[str] = []
    answers = iter(["7", "x", "2"])
    assert pick_session(rows, read=lambda _p: next(answers), write=shown.append, now=60) == "id1"
    assert shown[0].startswith("Recent sessions")
    assert "t0" in shown[1] and "(id0)" in shown[1]
    assert any("not a number" in line for line in shown)
    assert pick_session(rows, read=lambda _p: "", write=shown.append) == "id0"
    assert pick_session(rows, read=lambda _p: "q", write=shown.append) is None
    assert pick_session([], read=lambda _p: "1", write=shown.append) is None

    def eof(_prompt: str) -> str:
        raise EOFError

    assert pick_session(rows, read=eof, write=shown.append) is None


def test_the_chat_backend_resumes_a_stored_session(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    url = f"sqlite:///{tmp_path}/s.db"
    with Runtime(store=url, blob_dir=tmp_path / "b") as rt:
        session = rt.open_session(workspace=ws, model=ScriptedModel([ScriptReply(text="hi!")]))
        session.submit("hello there", timeout=30)
        sid = session.id
        session.close()
        (row,) = rt.list_sessions(workspace=ws)
        assert row.session_id == sid
        backend = SessionBackend(
            rt,
            BackendConfig(
                workspace=ws,
                model=ScriptedModel([ScriptReply(text="still here")]),
                speculation=False,
                resume=sid,
                mode=ApprovalMode.AUTO_EDIT,
            ),
            lambda _request: ApprovalDecision.ALLOW,
        )
        try:
            assert backend.session.id == sid
            banner = resumed_banner(sid, backend.session.history)
            assert banner[0] == f"resumed session {sid} (1 turn so far)"
            assert banner[1:] == ["  you: hello there", "  model: hi!"]
            turn = asyncio.run(backend.asubmit("go on", timeout=30))
            assert turn.status == "completed"
            backend.reset()  # /clear: a new session, not the resumed one
            assert backend.session.id != sid
        finally:
            backend.close()
        assert texts(url, sid)[-1] == "still here"


@pytest.mark.parametrize("flag", ["--resume", "--resume=abc"])
def test_chat_resume_without_a_store_is_one_line(flag: str, tmp_path: Path) -> None:
    done = fore("chat", flag, "--no-store", "--script", str(script_file(tmp_path, "x")))
    assert_one_line_error(done, 2, "needs a session store")


# -- the README's example --------------------------------------------------------------------------


def test_the_readme_store_example_runs_as_printed(tmp_path: Path) -> None:
    from tests.project.test_readme import _block, _run

    out = _run(_block("resume_session"), tmp_path)
    assert out.splitlines() == [
        "[(True, 1, 'remember: the deploy is on Friday')]",
        "On Friday. 4",
        "True True",
    ]
    assert (tmp_path / "sessions.db").is_file()


# -- the benchmarks (smoke tests: they run and print their baselines; nothing is timed) ------------


def test_fore_bench_store_sqlite_compares_with_and_without_a_store() -> None:
    done = fore(
        "bench", "--store", "sqlite", "--sessions", "3", "--turns", "2", "--think-ms", "100",
        "--duration", "30", "--no-progress", env={"COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "main-turn latency with a SQLite session store vs none" in done.stdout
    assert "pooled" in done.stdout and "store p99 ratio" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("verdict:")
    assert "no unit" not in done.stdout
    bad = fore("bench", "--store", "sqlite", "--compare")
    assert_one_line_error(bad, 2, "pick one")


def test_bench_store_resumes_through_the_runtime(tmp_path: Path) -> None:
    from fore.bench.store import _runtime_resume

    figures = _runtime_resume(tmp_path, 3)
    assert figures["runtime_resume_p99_ms"] > 0 and figures["runtime_open_p99_ms"] > 0
