"""The shell classifier's corpus: commands with the class they must get, kept as data.

The commands live in ``tests/data/shell_corpus/*.jsonl`` (one JSON object a
line: ``command``, ``expected``, ``source``, ``group``, and for commands taken
from other agents' test suites ``peer`` -- what that agent decided -- see the
README there). This module loads them for the classifier's tests and its
benchmark, and builds the workspace they are classified in: a directory with a
few files, a symlink inside it and two that lead outside, next to an
``outside`` directory holding a secret. Every command is classified with that
workspace, so the scope rule (reads stay inside the workspace) is part of
every verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CORPUS_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "shell_corpus"
"""Where the corpus files are (the source tree: they are test data, not shipped)."""

Expected = Literal["read-only", "write", "unknown"]
_CLASSES = frozenset({"read-only", "write", "unknown"})
_PEER_VERDICTS = frozenset({"allow", "deny"})


@dataclass(frozen=True, slots=True)
class CorpusEntry:
    """One command of the corpus and what the classifier must say about it."""

    command: str
    expected: Expected
    source: str
    """Where the command comes from: ``fore`` or ``owner/repo:path`` of a peer's test file."""
    group: str
    peer: Literal["allow", "deny"] | None = None
    """A peer's verdict in its own tests: ``allow`` (runs without asking) or ``deny``."""
    harmless: bool | None = None
    """Our judgement where it departs from the peer's: ``False`` for a command a peer
    allows that can write, run code, reach the network or read outside the workspace;
    ``True`` for one a peer refuses out of its own caution (``note`` says why)."""
    note: str = ""


def load_corpus(*files: str) -> list[CorpusEntry]:
    """The entries of the named corpus files (default: all), in file and line order."""
    if not CORPUS_DIR.is_dir():
        raise FileNotFoundError(
            f"the shell corpus is test data in the source tree ({CORPUS_DIR}); "
            "run this from a checkout"
        )
    paths = [CORPUS_DIR / f"{name}.jsonl" for name in files] or sorted(CORPUS_DIR.glob("*.jsonl"))
    entries: list[CorpusEntry] = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            entries.append(_entry(json.loads(line), f"{path.name}:{number}"))
    return entries


def _entry(record: dict[str, object], where: str) -> CorpusEntry:
    command, expected = record.get("command"), record.get("expected")
    source, group = record.get("source"), record.get("group", "")
    peer, note = record.get("peer"), record.get("note", "")
    harmless = record.get("harmless")
    if not isinstance(command, str) or expected not in _CLASSES:
        raise ValueError(f"{where}: needs a string command and an expected class")
    if not isinstance(source, str) or not source or not isinstance(group, str):
        raise ValueError(f"{where}: needs a source and a string group")
    if peer is not None and peer not in _PEER_VERDICTS:
        raise ValueError(f"{where}: peer must be 'allow' or 'deny'")
    if not isinstance(note, str) or (harmless is not None and not isinstance(harmless, bool)):
        raise ValueError(f"{where}: note must be a string and harmless a boolean")
    if harmless is not None and not note:
        raise ValueError(f"{where}: a harmless judgement needs a note saying why")
    return CorpusEntry(command, expected, source, group, peer, harmless, note)  # type: ignore[arg-type]


def make_workspace(base: Path, *, hostile: bool = True) -> Path:
    """Build the corpus workspace under ``base`` (idempotent) and return its path.

    ``ws/`` holds ``README.md``, ``file.txt``, ``src/app.py``, ``sub/``,
    ``docs/`` and ``inlink -> src`` (inside); ``outside/secret`` sits next to
    it. The hostile workspace (the corpus's) also has ``leak ->
    ../outside/secret`` and ``outdir -> ../outside``, symlinks leading out; a
    plain one (an ordinary project, for measuring usefulness) has not.
    """
    outside = base / "outside"
    workspace = base / "ws"
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "secret").write_text("SECRET\n")
    for directory in ("src", "sub", "docs"):
        (workspace / directory).mkdir(parents=True, exist_ok=True)
    (workspace / "README.md").write_text("# readme\n")
    (workspace / "file.txt").write_text("a\n")
    (workspace / "src" / "app.py").write_text("x = 1\n")
    links: dict[str, Path] = {"inlink": Path("src")}
    if hostile:
        links.update(leak=outside / "secret", outdir=outside)
    for name, target in links.items():
        if not (workspace / name).is_symlink():
            (workspace / name).symlink_to(target)
    return workspace.resolve()


_ENTRIES: list[CorpusEntry] = load_corpus() if CORPUS_DIR.is_dir() else []

CORPUS: list[tuple[str, str]] = [(entry.command, entry.expected) for entry in _ENTRIES]
"""``(command, expected class)`` for every corpus entry (classified in :func:`make_workspace`)."""

EXPANSION_OPERANDS: list[tuple[str, str]] = [
    (entry.command, entry.expected)
    for entry in _ENTRIES
    if entry.source == "fore" and entry.group == "expansion_operands"
]
"""The ``${...}`` operand group alone (those operands are re-read as bash may read them)."""
