"""The shell read-only classifier: the corpus, adversarial input, the git-config probe.

The classifier guards speculative shell commands, so every test here checks a
direction that matters: a harmful form that must not come out ``read-only``,
or an everyday read-only form that must stay ``read-only``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.gate.git_config import program_setting
from fore.actors.gate.rules import parse_gnu, sed_script_problem
from fore.actors.gate.shell import MAX_COMMAND_CHARS, classify_shell_command, explain_shell_command
from fore.bench.shell_corpus import CORPUS

CLASSES = {"read-only", "write", "unknown"}


def _id(command: str) -> str:
    return repr(command)[1:-1][:60] or "<empty>"


# ---------------------------------------------------------------------------
# Adversarial input: bounded, never a crash, never read-only by accident
# ---------------------------------------------------------------------------


def _nested(depth: int, inner: str) -> str:
    return "echo " + "$(echo " * depth + inner + ")" * depth


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("echo " + "\\" * 10_000, CLASSES),
        ("echo " + "\\" * 10_001, {"unknown"}),
        ("echo " + "\\\n" * 5_000 + "x", CLASSES),
        ("rm " + "\\\n" * 5_000 + "x", {"write"}),
        (_nested(30, "$(rm x)"), {"write"}),
        (_nested(30, "ls"), {"read-only", "unknown"}),
        ("echo " + "$(" * 300 + "x" + ")" * 300, {"unknown"}),
        ("(" * 5_000 + "ls" + ")" * 5_000, {"unknown"}),
        ("{ " * 3_000 + "ls; " + "}; " * 3_000, {"unknown"}),
        ("echo " + "a " * (MAX_COMMAND_CHARS // 2), {"unknown"}),
        ("echo " + "a " * 10_000, {"read-only"}),
        (" | ".join(["cat"] * 5_000), {"unknown"}),
        ("echo " + '"' * 10_001, {"unknown"}),
        ("eval " * 500 + "ls", {"unknown"}),
        ("echo " + "${a:-" * 300 + "x" + "}" * 300, {"unknown"}),
        ("cat <<EOF\n" + "$(ls)\n" * 3_000 + "EOF", {"unknown"}),
        ("sed '" + "s/[a/b/;" * 2_000 + "' f", {"unknown"}),
        ("echo '" + "x" * 20_000 + "'", {"read-only"}),
    ],
    ids=lambda value: _id(value) if isinstance(value, str) else None,
)
def test_adversarial_input_is_classified(command: str, allowed: set[str], ws: Path) -> None:
    assert classify_shell_command(command, ws) in allowed


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

WRITING = [
    "rm -rf build",
    "touch f",
    "echo x > out",
    "sed -i s/a/b/ f",
    "sort -o out f",
    "git branch feature",
    "find . -delete",
    "tee log",
    "git commit -m x",
    "cp a b",
    "uniq in out",
    "dd if=a of=b",
]
READ_ONLY = [
    "ls -la",
    "cat f",
    "grep -rn foo src",
    "git log --oneline",
    "git status",
    "find . -name '*.py'",
    "sort -u f",
    "head -n 3 f",
    "wc -l f",
    "echo hi",
    "sed -n 1p f",
    "cat < f",
]


def _compose(
    leaves: st.SearchStrategy[str], *, substitution: bool, hidden: bool = True
) -> st.SearchStrategy[str]:
    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        pairs = st.tuples(children, st.sampled_from(["|", "&&", "||", ";", "\n"]), children)
        forms = [
            pairs.map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
            children.map(lambda c: f"( {c} )"),
            children.map(lambda c: f"{{ {c}\n}}"),
        ]
        if substitution:
            forms.append(children.map(lambda c: f"echo $( {c} )"))
            forms.append(children.map(lambda c: f"cat <( {c} )"))
        if substitution and hidden:
            # Hidden in ${...} operands: an opaque pattern, and single quotes
            # that are literal inside double quotes.
            forms.append(children.map(lambda c: f"echo ${{PWD%$( {c} )}}"))
            forms.append(children.map(lambda c: f"echo \"${{x:-'$( {c} )'}}\""))
        return st.one_of(*forms)

    return st.recursive(leaves, extend, max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(
    _compose(st.sampled_from(WRITING + READ_ONLY), substitution=True),
    st.sampled_from(WRITING),
    st.sampled_from(["|", "&&", "||", ";"]),
    st.booleans(),
)
def test_compositions_with_a_write_are_never_read_only(
    ws: Path, composed: str, writing: str, operator: str, write_first: bool
) -> None:
    if write_first:
        command = f"{writing} {operator} {composed}"
    else:
        command = f"{composed} {operator} {{ {writing}\n}}"
    assert classify_shell_command(command, ws) != "read-only"


@settings(max_examples=300, deadline=None)
@given(_compose(st.sampled_from(WRITING), substitution=True))
def test_compositions_of_writes_are_write(ws: Path, command: str) -> None:
    assert classify_shell_command(command, ws) == "write"


@settings(max_examples=300, deadline=None)
@given(_compose(st.sampled_from(READ_ONLY), substitution=True, hidden=False))
def test_compositions_of_reads_stay_read_only(ws: Path, command: str) -> None:
    # Substitutions included: a read-only command inside $(...) is read-only too.
    assert classify_shell_command(command, ws) == "read-only"


_BASHY = st.text(
    alphabet=st.sampled_from(list("ab rm-ls|&;<>()$`'\"\\{}[]*?~#=\n\t!0123456789@P:"))
)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), _BASHY))
def test_arbitrary_text_never_raises(ws: Path, command: str) -> None:
    verdict = explain_shell_command(command, ws)
    assert classify_shell_command(command, ws) in CLASSES
    assert verdict.reason
    assert len(verdict.reason.splitlines()) == 1, verdict.reason  # one line, whatever the command
    assert classify_shell_command(command, None) in CLASSES


def test_parallel_threads_agree_with_a_single_thread(ws: Path) -> None:
    commands = [command for command, _ in CORPUS]
    expected = [classify_shell_command(command, ws) for command in commands]
    results: dict[int, list[str]] = {}

    def work(index: int) -> None:
        results[index] = [classify_shell_command(command, ws) for command in commands]

    threads = [threading.Thread(target=work, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(result == expected for result in results.values())


# ---------------------------------------------------------------------------
# Helpers with their own contracts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    ["p", "1,5p", "s/a/b/g", "/x/{p;d}", ":a;N;$!ba;s/\\n/ /g", "y/ab/cd/", "a text; w x"],
)
def test_sed_scripts_without_danger(script: str) -> None:
    assert sed_script_problem(script) is None


@pytest.mark.parametrize(
    "script",
    ["w out", "s/a/b/w out", "s/a/b/e", "e ls", "r f", "1{\nW f\n}", "s/[/]/x/w f", "s/a/b", "{p"],
)
def test_sed_scripts_with_danger_or_doubt(script: str) -> None:
    assert sed_script_problem(script) is not None


def test_gnu_option_parsing_follows_clusters_abbreviations_and_permutation() -> None:
    from fore.actors.gate.rules.coreutils import _SORT

    parsed = parse_gnu(["-rnk2", "file", "--out=x", "--", "-o"], _SORT)
    assert ("k", "2") in parsed.options
    assert ("output", "x") in parsed.options
    assert parsed.operands == ("file", "-o")


# ---------------------------------------------------------------------------
# The git-config probe on real repositories
# ---------------------------------------------------------------------------

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git("init", "-q", cwd=path)
    (path / "src" / "pkg").mkdir(parents=True)
    return path


GIT_READS = ["git log --oneline", "git status", "git diff", "git show HEAD", "git branch"]


@needs_git
@pytest.mark.parametrize("command", GIT_READS)
def test_clean_repository_keeps_git_reads_read_only(repo: Path, command: str) -> None:
    assert classify_shell_command(command, repo) == "read-only"
    assert classify_shell_command(command, repo / "src" / "pkg") == "read-only"


@needs_git
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("core.pager", "less"),
        ("pager.log", "rm -rf ~"),
        ("diff.external", "/tmp/x"),
        ("diff.foo.textconv", "hexdump"),
        ("diff.foo.command", "x"),
        ("core.fsmonitor", "/tmp/hook"),
        ("credential.helper", "store"),
        ("core.askPass", "/tmp/x"),
        ("core.sshCommand", "ssh -i x"),
        ("gpg.program", "/tmp/gpg"),
        ("gpg.ssh.program", "/tmp/x"),
        ("core.hooksPath", "/tmp/hooks"),
        ("filter.lfs.smudge", "git-lfs smudge"),
        ("interactive.diffFilter", "delta"),
        ("sequence.editor", "vim"),
        ("core.editor", "vim"),
        ("include.path", "/tmp/other.gitconfig"),
        ("log.showSignature", "true"),
    ],
)
def test_config_naming_a_program_makes_git_unknown(repo: Path, key: str, value: str) -> None:
    _git("config", key, value, cwd=repo)
    assert classify_shell_command("git log", repo) == "unknown"
    assert classify_shell_command("git status", repo / "src") == "unknown"
    assert "git config" in explain_shell_command("git diff", repo).reason
    # Only git is affected; without a workspace git is never read-only at all.
    assert classify_shell_command("ls -la", repo) == "read-only"
    assert classify_shell_command("git log", None) == "unknown"


@needs_git
def test_harmless_config_keys_keep_git_read_only(repo: Path) -> None:
    _git("config", "user.name", "Someone", cwd=repo)
    _git("config", "alias.co", "checkout", cwd=repo)
    _git("config", "color.ui", "auto", cwd=repo)
    assert classify_shell_command("git log", repo) == "read-only"


@needs_git
def test_writes_stay_writes_whatever_the_config(repo: Path) -> None:
    _git("config", "core.pager", "less", cwd=repo)
    assert classify_shell_command("git commit -m x", repo) == "write"
    assert classify_shell_command("git log > out", repo) == "write"


@needs_git
def test_dot_git_file_pointing_to_a_separate_gitdir(tmp_path: Path) -> None:
    work, gitdir = tmp_path / "work", tmp_path / "store.git"
    work.mkdir()
    _git("init", "-q", f"--separate-git-dir={gitdir}", cwd=work)
    assert (work / ".git").is_file()
    assert classify_shell_command("git log", work) == "read-only"
    _git("config", "diff.external", "/tmp/evil", cwd=work)
    assert classify_shell_command("git log", work) == "unknown"


@needs_git
@pytest.mark.parametrize(
    "text",
    [
        "[core] pager = less\n",
        "[CORE]\n\tPAGER = less\n",
        '[diff "a b"]\n\ttextconv = cat\n',
        "[diff.x]\n\ttextconv = cat\n",
        "[core]\n\tbare = false\n[core]\n\tpager\n",
    ],
)
def test_reader_sees_keys_git_would_see(repo: Path, text: str) -> None:
    (repo / ".git" / "config").write_text(text)
    assert classify_shell_command("git log", repo) == "unknown"


@needs_git
@pytest.mark.parametrize(
    "text",
    [
        "# pager = less\n; [core]\n[user]\n\tname = x # pager = less\n",
        '[user]\n\tname = "a; b # c"\n',
        "\ufeff[core]\n\tbare = false\n",
    ],
)
def test_comments_and_values_do_not_look_like_keys(repo: Path, text: str) -> None:
    (repo / ".git" / "config").write_text(text)
    assert classify_shell_command("git log", repo) == "read-only"


@needs_git
@pytest.mark.parametrize(
    "text",
    [
        "[core]\n\tx = a \\\n[alias]\n\tpager = less\n",  # continuation hides a section
        '[core]\n\tx = "unterminated\n',
        "[core\n",
        "not a config line at all\n",
        "=value\n",
    ],
)
def test_config_the_reader_cannot_follow_is_doubt(repo: Path, text: str) -> None:
    (repo / ".git" / "config").write_text(text)
    assert classify_shell_command("git log", repo) == "unknown"


@needs_git
def test_submodule_config_is_probed(repo: Path) -> None:
    module = repo / ".git" / "modules" / "lib"
    module.mkdir(parents=True)
    (module / "config").write_text("[core]\n\tfsmonitor = /tmp/hook\n")
    assert classify_shell_command("git status", repo) == "unknown"


@needs_git
def test_git_after_a_directory_change_probes_every_directory_it_may_run_in(repo: Path) -> None:
    assert classify_shell_command("cd src && git log", repo) == "read-only"
    assert classify_shell_command("cd src && ls", repo) == "read-only"
    assert classify_shell_command("cd /tmp && git log", repo) == "unknown"
    nested = repo / "src" / "pkg"
    _git("init", "-q", cwd=nested)
    _git("config", "core.pager", "less", cwd=nested)
    assert classify_shell_command("git log", repo) == "read-only"
    for command in ("cd src/pkg && git log", "git -C src/pkg log", "(cd src; cd pkg; git log)"):
        assert classify_shell_command(command, repo) == "unknown", command
        assert "core.pager" in explain_shell_command(command, repo).reason


def test_missing_working_directory_is_doubt(tmp_path: Path) -> None:
    assert classify_shell_command("git log", tmp_path / "missing") == "unknown"
    assert program_setting(tmp_path / "missing") is not None


def test_directory_outside_any_repository(tmp_path: Path) -> None:
    if any((parent / ".git").exists() for parent in [tmp_path, *tmp_path.parents]):
        pytest.skip("the temporary directory lies inside a git repository")
    assert program_setting(tmp_path) is None
    assert classify_shell_command("git status", tmp_path) == "read-only"
