"""The command families issue 19 allows where provably safe, as properties (point 9).

The corpus (``bench/data/shell_corpus``) pins examples; these generate many more:
awk programs assembled from harmless and dangerous statements, ``bash -c`` and
``$(...)`` wrapped around commands of every class, ``NAME=value`` prefixes for
every name. A wrapper never makes a command look safer than it is, and a
harmless awk program really changes nothing when the system's awk runs it.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.gate.rules import HARMLESS_ENVIRONMENT, awk_program_problem
from fore.actors.gate.shell import classify_shell_command
from fore.bench.shell_corpus import load_corpus

# ---------------------------------------------------------------------------
# awk
# ---------------------------------------------------------------------------

HARMLESS = [
    "print $1",
    "print",
    'printf "%s\\n", $0',
    "n++",
    "s += $2",
    "if ($3 > 10) print $1",
    'x = "a > b | c"',
    "print /a|b/",
    "y = a / 2 / 3",
    "print (a > b)",
    'gsub(/x/, "y")',
    'print ENVIRON["HOME"]',
    "getline",
    "getline line",
    'close("f")',
    "print a || b",
    '# print > "out"\n',
]
DANGEROUS = [
    "print length($0) > 3 ? 1 : 0",  # a redirect to the file named "1"
    'print > "out"',
    'print >> "out"',
    'printf "%s", $0 > "out"',
    'print | "sh"',
    'print |& "cat"',
    'system("id")',
    '"date" | getline',
    'getline x < "/etc/passwd"',
    'ARGV[1] = "/etc/passwd"',
    "ARGC = 2",
    '@include "x"',
    'fn = "system"; @fn("id")',
]


def _program(statements: list[str]) -> str:
    return "{ " + "; ".join(statements) + " }"


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(HARMLESS), max_size=4),
    st.sampled_from(DANGEROUS),
    st.lists(st.sampled_from(HARMLESS), max_size=4),
)
def test_an_awk_program_with_a_dangerous_statement_is_never_read_only(
    before: list[str], danger: str, after: list[str]
) -> None:
    program = _program([*before, danger, *after])
    assert awk_program_problem(program) is not None, program


AWK = shutil.which("awk")


@pytest.mark.skipif(AWK is None, reason="no awk")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(HARMLESS), min_size=1, max_size=5))
def test_a_harmless_awk_program_changes_nothing_in_the_real_awk(
    tmp_path_factory: pytest.TempPathFactory, statements: list[str]
) -> None:
    program = _program(statements)
    work = tmp_path_factory.mktemp("awk")
    (work / "in.txt").write_text("1 2 3\n4 5 6\n")
    command = f"awk {shlex.quote(program)} in.txt"
    if classify_shell_command(command, work) != "read-only":
        return  # doubt is always allowed
    before = sorted(path.name for path in work.iterdir())
    subprocess.run(["bash", "-c", command], cwd=work, capture_output=True, timeout=10, check=False)
    assert sorted(path.name for path in work.iterdir()) == before, command


# ---------------------------------------------------------------------------
# Wrappers: bash -c, $(...), <(...)
# ---------------------------------------------------------------------------

_SAMPLES = [entry for entry in load_corpus("fore", "families") if "'" not in entry.command]
_READ_ONLY = [entry.command for entry in _SAMPLES if entry.expected == "read-only"]
_NOT_READ_ONLY = [entry.command for entry in _SAMPLES if entry.expected != "read-only"]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["bash -c", "bash -lc", "sh -c", "zsh -c", "dash -c", "bash -e -c"]),
    st.sampled_from(_NOT_READ_ONLY),
)
def test_a_shell_running_a_command_is_never_safer_than_the_command(
    ws: Path, shell: str, command: str
) -> None:
    assert classify_shell_command(f"{shell} '{command}'", ws) != "read-only", command


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["bash -c", "sh -lc"]), st.sampled_from(_READ_ONLY))
def test_a_shell_running_a_read_only_command_is_read_only(
    ws: Path, shell: str, command: str
) -> None:
    if "\n" in command:
        return
    assert classify_shell_command(f"{shell} '{command}'", ws) == "read-only", command


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["echo $({})", "echo `{}`", "cat <({})", 'echo "x $({}) y"']),
       st.sampled_from(_NOT_READ_ONLY))  # fmt: skip
def test_a_substitution_is_never_safer_than_its_command(ws: Path, form: str, command: str) -> None:
    if "`" in command or "\n" in command:
        return
    assert classify_shell_command(form.format(command), ws) != "read-only", command


# ---------------------------------------------------------------------------
# NAME=value
# ---------------------------------------------------------------------------

_VALUES = {"COLUMNS": "80", "LINES": "24", "TABSIZE": "8", "TZ": "Europe/Paris"}


@pytest.mark.parametrize("name", sorted(HARMLESS_ENVIRONMENT))
def test_harmless_names_keep_a_read_only_command_read_only(ws: Path, name: str) -> None:
    value = _VALUES.get(name, "C")
    assert classify_shell_command(f"{name}={value} ls", ws) == "read-only"
    assert classify_shell_command(f"{name}=../../x ls", ws) != "read-only"
    assert classify_shell_command(f"{name}=$(rm x) ls", ws) == "write"


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True))
def test_any_other_name_is_doubt(ws: Path, name: str) -> None:
    if name in HARMLESS_ENVIRONMENT:
        return
    assert classify_shell_command(f"{name}=x ls", ws) == "unknown", name
    assert classify_shell_command(f"{name}=x", ws) == "unknown", name
