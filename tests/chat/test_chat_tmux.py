"""``fore chat --demo`` in a real terminal: tmux runs it, ``send-keys`` types, the screen is read.

Each test starts its own tmux server on a private socket (``tmux -L``, no
user configuration), runs the real command in a pane of a fixed size, and
kills the server at the end. ``capture-pane -p`` reads the screen as text,
``capture-pane -e`` with its colours (the suggestion must be grey or dim).
``TMPDIR`` points at the test's own directory, so the overlays the demo's
speculations create are found (and must be gone) under it. Every wait is a
bounded poll of what the screen shows; nothing is timed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fore.supervision.chat.demo import ADD_TEST, FIX

# A developer without tmux skips these; CI (.ci/run sets CI and installs tmux) must not.
pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None and not os.environ.get("CI"), reason="tmux is not installed"
)

WAIT = 60.0
PROMPT = "› "


class Tmux:
    """One private tmux server with one pane running ``command``."""

    def __init__(
        self, command: list[str], *, cwd: Path, env: dict[str, str], width: int, height: int
    ) -> None:
        self.socket = f"fore-chat-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # The pane stays after the command ends, with its exit code, until the kill.
        script = f"cd {shlex.quote(str(cwd))} && env {exports} {shlex.join(command)}; "
        script += 'echo "[exit $?]"; sleep 600'
        self._tmux("new-session", "-d", "-s", "chat", "-x", str(width), "-y", str(height), script)

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def screen(self, *, colours: bool = False) -> str:
        flags = ["-p", "-J", "-t", "chat"] + (["-e"] if colours else [])
        return self._tmux("capture-pane", *flags)

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", "chat", "-l", text)

    def keys(self, *names: str) -> None:
        self._tmux("send-keys", "-t", "chat", *names)

    def wait(self, predicate: Callable[[str], bool], what: str, timeout: float = WAIT) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")
            time.sleep(0.05)

    def wait_text(self, text: str, what: str | None = None) -> str:
        return self.wait(lambda screen: text in screen, what or repr(text))

    def kill(self) -> None:
        try:
            self._tmux("kill-server")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass


def prompt_line(screen: str) -> str:
    """The prompt's line: the last line that starts with the prompt mark."""
    lines = [line for line in screen.splitlines() if line.startswith(PROMPT)]
    return lines[-1] if lines else ""


def ghost_is(text: str) -> Callable[[str], bool]:
    return lambda screen: prompt_line(screen).rstrip() == PROMPT + text


@pytest.fixture
def run_chat(tmp_path: Path) -> Iterator[Callable[..., Tmux]]:
    servers: list[Tmux] = []
    tmp = tmp_path / "tmp"
    tmp.mkdir()

    def start(*args: str, width: int = 120, height: int = 40) -> Tmux:
        env = {"TMPDIR": str(tmp), "FORE_LOG_LEVEL": "critical", "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "fore.supervision.cli", "chat", *args]
        server = Tmux(command, cwd=tmp_path, env=env, width=width, height=height)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


def overlays(tmp_path: Path) -> list[str]:
    """The speculation overlays that exist now (the demo's TMPDIR is the test's)."""
    root = tmp_path / "tmp" / "fore-overlays"
    if not root.exists():
        return []
    return sorted(
        f"{process.name}/{entry.name}"
        for process in root.iterdir()
        if process.is_dir()
        for entry in process.iterdir()
        if entry.name != "journal"
    )


_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def style_at(line: str, text: str) -> tuple[int | str | None, bool]:
    """The foreground colour and the dim flag in effect where ``text`` starts on ``line``."""
    position = line.index(text)
    fg: int | str | None = None
    dim = False
    for match in _SGR.finditer(line[:position]):
        params = [int(p) if p else 0 for p in match.group(1).split(";")] or [0]
        i = 0
        while i < len(params):
            p = params[i]
            if p == 0:
                fg, dim = None, False
            elif p == 2:
                dim = True
            elif p == 22:
                dim = False
            elif p == 39:
                fg = None
            elif 30 <= p <= 37 or 90 <= p <= 97:
                fg = p
            elif p == 38 and i + 2 < len(params) and params[i + 1] == 5:
                fg, i = f"256:{params[i + 2]}", i + 2
            elif p == 38 and i + 4 < len(params) and params[i + 1] == 2:
                r, g, b = params[i + 2 : i + 5]
                fg, i = f"rgb:{r},{g},{b}", i + 4
            i += 1
    return fg, dim


def is_grey(fg: int | str | None) -> bool:
    if fg == 90:
        return True
    if isinstance(fg, str) and fg.startswith("256:"):
        index = int(fg[4:])
        return index == 8 or 232 <= index <= 250
    if isinstance(fg, str) and fg.startswith("rgb:"):
        r, g, b = (int(v) for v in fg[4:].split(","))
        return max(r, g, b) - min(r, g, b) < 16 and 64 <= r <= 200
    return False


def demo_workspace(tmp_path: Path) -> Path:
    return tmp_path / "demo"


def open_demo(run_chat: Callable[..., Tmux], tmp_path: Path, *extra: str) -> Tmux:
    term = run_chat("--demo", "--workspace", str(demo_workspace(tmp_path)), *extra)
    term.wait_text("no test covers that yet", "the demo's opening answer")
    term.wait(lambda s: "│ no suggestion" in s, "the opening turn to end")
    return term


def test_the_suggestion_is_grey_tab_applies_it_and_typing_aborts(
    run_chat: Callable[..., Tmux], tmp_path: Path
) -> None:
    term = open_demo(run_chat, tmp_path)
    ws = demo_workspace(tmp_path)
    term.type("hi")
    term.keys("Enter")
    term.wait(ghost_is(ADD_TEST), "the suggestion in the prompt")
    term.wait_text("ready: 1 call, 1 file", "the speculation to be ready")
    # grey (or dim) ghost text, drawn by the terminal
    coloured = [line for line in term.screen(colours=True).splitlines() if ADD_TEST in line]
    assert coloured, "the suggestion is not on the screen"
    fg, dim = style_at(coloured[-1], ADD_TEST)
    assert dim or is_grey(fg), f"the suggestion is drawn with fg={fg} dim={dim}"
    assert "test_empty_title" not in (ws / "tests/test_slug.py").read_text()
    assert overlays(tmp_path), "the speculation's overlay exists before Tab"

    term.keys("Tab")
    term.wait_text("~ tests/test_slug.py  +3 −0", "the per-file diff line")
    assert "test_empty_title" in (ws / "tests/test_slug.py").read_text()

    # the pipelined suggestion comes next; typing throws it and its speculation away
    term.wait(ghost_is(FIX), "the pipelined suggestion")
    term.wait_text("ready: 1 call, 1 file", "its speculation to be ready")
    term.type("x")
    screen = term.wait(lambda s: prompt_line(s).rstrip() == PROMPT + "x", "the typed key")
    assert FIX not in prompt_line(screen)
    deadline = time.monotonic() + WAIT
    while overlays(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert overlays(tmp_path) == [], "an aborted speculation left its overlay"
    assert "untitled" not in (ws / "textkit/slug.py").read_text()


def test_ctrl_c_cancels_a_long_turn(run_chat: Callable[..., Tmux], tmp_path: Path) -> None:
    term = open_demo(run_chat, tmp_path)
    term.type("count slowly")
    term.keys("Enter")
    term.wait_text("Counting slowly: 1 2", "the slow answer streaming")
    term.keys("C-c")
    term.wait_text("⊘ cancelled", "the cancelled turn")
    term.wait(lambda s: "│ no suggestion" in s or "Tab" in prompt_line(s), "the prompt back")
    term.type("hello")
    term.keys("Enter")
    term.wait_text("I am the demo's scripted model", "an answer after the cancel")
    term.keys("C-c")
    term.keys("C-c")
    term.wait_text("[exit 0]", "two Ctrl-C to leave")


def test_an_approval_prompt_appears_for_a_write_in_default_mode_and_n_refuses_it(
    run_chat: Callable[..., Tmux], tmp_path: Path
) -> None:
    term = open_demo(run_chat, tmp_path, "--approval", "default")
    ws = demo_workspace(tmp_path)
    before = (ws / "tests/test_slug.py").read_text()
    term.type(ADD_TEST)
    term.keys("Enter")
    term.wait_text("? allow edit  tests/test_slug.py", "the approval prompt")
    term.wait_text("y yes · n no · a always allow edit")
    term.type("n")
    term.wait_text("⊘ edit  tests/test_slug.py  refused", "the refused call")
    term.wait_text("I left the files as they were")
    assert (ws / "tests/test_slug.py").read_text() == before


def test_a_terminal_too_narrow_gets_a_clear_message(
    run_chat: Callable[..., Tmux], tmp_path: Path
) -> None:
    term = run_chat("--demo", width=30, height=20)
    screen = term.wait_text("[exit 2]", "the refusal")
    flat = " ".join(screen.split())
    assert "at least 40x8" in flat and "30x20" in flat


def test_without_a_terminal_it_says_to_use_fore_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fore.supervision.cli", "chat", "--demo"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "needs an interactive terminal" in done.stderr
    assert "fore run PROMPT" in done.stderr
