"""sed scripts in the shell classifier: a script that writes or runs a command is never read-only.

sed's ``w``/``W``/``s///w`` write files (opened when the script is compiled,
before any input is read), ``e``/``s///e`` run shell commands and ``r``/``R``
read other files. The scripts here are built from sed's grammar -- addresses,
labels, branches, braces, ``;``, blanks and newlines -- so each dangerous
command is one GNU sed really compiles; the classifier must never call such a
script read-only. Where GNU sed is installed, it is the second oracle: its
``--sandbox`` mode refuses exactly these commands at compile time, so a script
it refuses must not be one the classifier lets run.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.gate.rules import sed_script_problem
from fore.actors.gate.shell import classify_shell_command

# ---------------------------------------------------------------------------
# The reported holes: a label that ends at a blank hides the next command
# ---------------------------------------------------------------------------

LABEL_HOLES = [
    ":a e touch x",
    ":a w out",
    ":a s/h/x/w y",
    ":a\tw out",
    "b end w o",
    "b end\tw o",
    "t end w o",
    "T end w o",
    "v 4.2 w o",
    "v\t4.2\tw o",
    "b end e date",
    "t x s/a/b/e",
    "b x r /etc/passwd",
    "b x R in",
    "b x W o",
    "b a#x;w o",
    "/x/{b a\tw o\n}",
    ":a;:b\tw o",
    "1{:a\n}; b a s/x/y/w o",
]


@pytest.mark.parametrize("script", LABEL_HOLES)
@pytest.mark.parametrize("options", ["", "-n ", "-E ", "--posix "])
def test_a_command_after_a_label_is_checked(script: str, options: str, ws: Path) -> None:
    assert sed_script_problem(script) is not None
    assert classify_shell_command(f"sed {options}{shlex.quote(script)} f", ws) != "read-only"


@pytest.mark.parametrize(
    "script",
    [
        ":a;N;$!ba;s/\\n/ /g",
        ":a;s/x/y/;ta",
        "/x/{:a;N;ba}",
        "/x/{p;b}",
        "b end;p;:end",
        ":top\np\nb top",
        "v 4.2",
        "b",
        "t",
    ],
)
def test_label_idioms_stay_harmless(script: str) -> None:
    assert sed_script_problem(script) is None


# ---------------------------------------------------------------------------
# Scripts from sed's grammar
# ---------------------------------------------------------------------------

_LABEL_NAMES = st.sampled_from(["a", "end", "x1", "loop", "l.2"])
_ADDRESS = st.sampled_from(["", "1", "$", "/re/", "1,3", "/a/,/b/", "0~2", "2,+1", "\\%x%"])
_BANG = st.sampled_from(["", "!"])
_BLANKS = st.sampled_from(["", " ", "\t", "  "])

# Labelled commands: GNU sed ends the label at a blank, ';' or a newline, and
# the next command may follow any of them.
_LABEL_COMMANDS = st.one_of(
    st.tuples(st.sampled_from(["b", "t", "T", ":"]), _BLANKS, _LABEL_NAMES).map("".join),
    st.sampled_from(["v 4.2", "v\t4.0"]),
)
# Commands that must be ended by ';' or a newline (a bare ``b`` too: after a
# blank, GNU sed would take the next word for its label).
_PLAIN_COMMANDS = st.sampled_from(
    [
        "p", "d", "n", "N", "x", "h", "G", "=", "l", "q", "s/a/b/", "s|x|y|g", "s/[/]/x/2",
        "y/ab/cd/", "b", "t", "v",
    ]
)  # fmt: skip
# Commands that run to the end of the line.
_LINE_COMMANDS = st.sampled_from(["a text", "i\\\ninserted", "c changed"])
_DANGEROUS = st.sampled_from(
    [
        "w out", "W out", "e", "e touch x", "r /etc/passwd", "R in", "s/a/b/w out", "s/x/y/e",
        "s/a/b/gw out", "s/x/y/pe", "1w out",
    ]
)  # fmt: skip


@st.composite
def _command(draw: st.DrawFn, dangerous: bool) -> tuple[str, str]:
    """One command and the separators that may follow it: (text, kind)."""
    prefix = draw(_ADDRESS) + draw(_BANG) + draw(_BLANKS)
    if dangerous:
        return prefix + draw(_DANGEROUS), "line"
    kind = draw(st.sampled_from(["label", "plain", "line"]))
    if kind == "label":
        return draw(_LABEL_COMMANDS), "label"  # ':' takes no address
    if kind == "plain":
        return prefix + draw(_PLAIN_COMMANDS), "plain"
    return prefix + draw(_LINE_COMMANDS), "line"


_SEPARATORS = {
    "label": [" ", "\t", ";", "\n", " ;\n"],
    "plain": [";", "\n", " ; ", ";\n"],
    "line": ["\n"],
}


@st.composite
def _script(draw: st.DrawFn, *, with_danger: bool) -> str:
    """A script whose commands GNU sed compiles as commands, optionally with a dangerous one."""
    count = draw(st.integers(min_value=1, max_value=6))
    danger_at = draw(st.integers(min_value=0, max_value=count - 1)) if with_danger else -1
    parts: list[str] = []
    depth = 0
    for index in range(count):
        if draw(st.booleans()) and depth < 2:
            parts.append(draw(_ADDRESS) + "{" + draw(st.sampled_from(["", "\n", " "])))
            depth += 1
        text, kind = draw(_command(index == danger_at))
        parts.append(text)
        parts.append(draw(st.sampled_from(_SEPARATORS[kind])))
        if depth and draw(st.booleans()):
            parts.append("}" + draw(st.sampled_from(["\n", ";", ";\n"])))
            depth -= 1
    parts.extend("}\n" for _ in range(depth))
    return "".join(parts)


@settings(max_examples=600, deadline=None)
@given(_script(with_danger=True), st.sampled_from(["", "-n ", "-E ", "-s "]))
def test_scripts_with_a_dangerous_command_are_never_read_only(
    ws: Path, script: str, options: str
) -> None:
    assert sed_script_problem(script) is not None, script
    command = f"sed {options}{shlex.quote(script)} file"
    assert classify_shell_command(command, ws) != "read-only", command


@settings(max_examples=300, deadline=None)
@given(st.lists(_script(with_danger=False), min_size=1, max_size=3), _script(with_danger=True))
def test_a_dangerous_expression_among_several_is_found(
    ws: Path, harmless: list[str], danger: str
) -> None:
    expressions = [*harmless, danger]
    command = "sed " + " ".join(f"-e {shlex.quote(e)}" for e in expressions) + " file"
    assert classify_shell_command(command, ws) != "read-only", command


# ---------------------------------------------------------------------------
# GNU sed itself as the oracle
# ---------------------------------------------------------------------------

_GNU_SED = shutil.which("sed")


def _is_gnu_sed() -> bool:
    if _GNU_SED is None:
        return False
    result = subprocess.run([_GNU_SED, "--version"], capture_output=True, text=True, check=False)
    return "GNU sed" in result.stdout


needs_gnu_sed = pytest.mark.skipif(not _is_gnu_sed(), reason="GNU sed is not installed")

_SOUP = st.sampled_from(
    [
        "b", "t", "T", ":", "v", " ", "\t", "\n", ";", "{", "}", "#", "!", ",", "\\", "\\\n",
        "w o", "W o", "e", "e x", "r f", "R f", "s/a/b/", "s/a/b/w o", "s/x/y/e", "s/a/b/ w o",
        "a", "a x", "i", "c", "p", "N", "q", "l 5", "x", "=", "y/a/b/", "lab", "4.2",
        "1", "$", "/re/", "0~2", "+2", "I", "M", "[", "]", "/", "s", "w", "s/[/]/x/", "\\%x%",
    ]
)  # fmt: skip


def _sandbox_refuses(script: str, *options: str) -> bool:
    """Whether GNU sed's sandbox refuses an e/r/w command in ``script``.

    The sandbox refuses those commands while compiling, and the input is
    empty, so nothing in the script runs; the working directory is a fresh
    temporary one all the same.
    """
    assert _GNU_SED is not None
    with tempfile.TemporaryDirectory(prefix="fore-sed-oracle-") as work:
        result = subprocess.run(
            [_GNU_SED, "--sandbox", "-n", *options, "-e", script],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd=work,
            check=False,
            timeout=30,
        )
    return "sandbox" in result.stderr


@needs_gnu_sed
@pytest.mark.parametrize("script", LABEL_HOLES)
def test_gnu_sed_agrees_the_reported_scripts_are_dangerous(script: str) -> None:
    if script == "b a#x;w o":  # dangerous for busybox sed; GNU reads '#x;w o' as a comment
        assert not _sandbox_refuses(script)
        return
    assert _sandbox_refuses(script)


@needs_gnu_sed
@settings(max_examples=400, deadline=None)
@given(st.lists(_SOUP, min_size=1, max_size=9).map("".join))
def test_scripts_gnu_sed_sandbox_refuses_are_never_harmless(script: str) -> None:
    if sed_script_problem(script) is not None:
        return  # already doubt; only a script called harmless needs the oracle
    assert not _sandbox_refuses(script), script
    assert not _sandbox_refuses(script, "--posix"), script
