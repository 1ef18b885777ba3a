"""The corpus as data: every command gets its expected class, peers' unsafe commands are
never read-only, and Fore allows at least 95% of the harmless commands peers allow.

The corpus is ``bench/data/shell_corpus/*.jsonl`` (see the README there). It is
classified in the corpus workspace (with symlinks leading out); the usefulness
share is measured in the same workspace without them, an ordinary project.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fore.actors.gate.shell import classify_shell_command, explain_shell_command
from fore.bench.shell_corpus import CorpusEntry, load_corpus, make_workspace

ENTRIES = load_corpus()
CLASSES = {"read-only", "write", "unknown"}
MIN_SHARE = 0.95

KNOWN_REFUSALS: dict[str, str] = {
    "echo $(cat $(ls))": "cat's operands are only known at run time: $(ls) may name a "
    "symlink leading out (the corpus workspace has one), so cat could read outside",
    "grep pattern\\\nfile": "bash joins the backslash-newline (grep reads stdin for "
    "'patternfile') while tree-sitter reads two words: the readings differ, so doubt",
    "FOO=bar": "an assignment changes what later commands see; only names proven "
    "harmless (locale, TZ, widths, colours) are allowed -- alone it prints nothing",
    "cd /tmp": "a change of directory out of the workspace (it prints nothing alone)",
    "git --help": "git --help runs man and a pager, programs the gate does not check",
}
"""Harmless commands a peer allows that Fore refuses, and why refusing is right."""


def _id(entry: CorpusEntry) -> str:
    return f"{entry.source.split(':')[0]}:{repr(entry.command)[1:-1][:50]}"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("plain"), hostile=False)


def test_the_corpus_is_large_data_with_every_class_and_every_peer() -> None:
    assert len(ENTRIES) >= 1_000
    counts = {kind: sum(entry.expected == kind for entry in ENTRIES) for kind in CLASSES}
    assert min(counts.values()) >= 100, counts
    ours = [entry.command for entry in ENTRIES if entry.source == "fore"]
    assert len(ours) == len(set(ours)), "duplicate commands in Fore's own files"
    keys = [(entry.command, entry.source) for entry in ENTRIES]
    assert len(keys) == len(set(keys)), "a command twice from the same source"
    peers = [entry for entry in ENTRIES if entry.peer is not None]
    repositories = {entry.source.split(":")[0] for entry in peers}
    assert repositories == {
        "openai/codex",
        "google-gemini/gemini-cli",
        "QwenLM/qwen-code",
        "continuedev/continue",
    }
    assert all(":" in entry.source for entry in peers)
    assert all(entry.note for entry in ENTRIES if entry.harmless is not None)


@pytest.mark.parametrize("entry", ENTRIES, ids=[_id(entry) for entry in ENTRIES])
def test_corpus(entry: CorpusEntry, hostile: Path) -> None:
    verdict = explain_shell_command(entry.command, hostile)
    assert classify_shell_command(entry.command, hostile) == entry.expected, verdict.reason
    assert verdict.reason.strip() and "\n" not in verdict.reason


def test_no_command_a_peer_calls_unsafe_is_read_only(hostile: Path, plain: Path) -> None:
    """0 peer-unsafe commands are read-only, in the hostile and in the plain workspace.

    A peer's refusal is taken as unsafe unless the corpus marks it harmless with
    a reason (a peer's parser limit, say); those are in the bash differential.
    """
    unsafe = [entry for entry in ENTRIES if entry.peer == "deny" and entry.harmless is not True]
    assert len(unsafe) > 500
    allowed = [
        entry.command
        for entry in unsafe
        for workspace in (hostile, plain)
        if classify_shell_command(entry.command, workspace) == "read-only"
    ]
    assert allowed == []


def test_fore_allows_at_least_95_percent_of_the_harmless_commands_peers_allow(
    plain: Path,
) -> None:
    allowed = {
        entry.command for entry in ENTRIES if entry.peer == "allow" and entry.harmless is not False
    }
    refused = {
        command: explain_shell_command(command, plain).reason
        for command in sorted(allowed)
        if classify_shell_command(command, plain) != "read-only"
    }
    share = 1 - len(refused) / len(allowed)
    print(f"\npeer-allowed harmless commands: {len(allowed)}; Fore allows {share:.1%}")
    for command, reason in refused.items():
        print(f"  refused {command!r}: {reason}")
    assert share >= MIN_SHARE, refused
    # Every refusal is one we have reasons for (a new one fails until it is argued).
    assert set(refused) <= set(KNOWN_REFUSALS), set(refused) - set(KNOWN_REFUSALS)
