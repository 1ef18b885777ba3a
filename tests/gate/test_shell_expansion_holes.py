"""Every command the audit's bash fuzzer found classified read-only while bash wrote.

The 196 commands below hide a command or process substitution inside a
``${...}`` operator -- a ``#``/``%``/``/``/``^``/``,`` pattern that tree-sitter
leaves as an opaque ``regex`` node, or single quotes and ``$'...'`` that are
literal inside a double-quoted ``${x:-...}`` or an unquoted here-document --
and real bash ran ``touch MARK`` for each of them. None may be read-only, and
since the inner command visibly writes, the classifier says ``write`` for
almost all of them (a few it can only call ``unknown``). A representative
subset, grouped by construct, is also in the corpus (``bench/shell_corpus.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fore.actors.gate.shell import classify_shell_command, explain_shell_command
from fore.bench.shell_corpus import make_workspace


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus workspace: commands are classified as a speculation would."""
    return make_workspace(tmp_path_factory.mktemp("corpus"))


HOLES: tuple[str, ...] = (
    "echo ${PWD,`touch MARK`}",
    "echo ${PWD%$(touch MARK)}",
    "echo ${HOME,`touch MARK`}",
    "echo ${PWD^<(touch MARK)}*",
    "echo ${HOME^$(touch MARK)}",
    "echo ${PWD##<(touch MARK)}",
    "echo ${HOME,,$(touch MARK)}",
    "grep x ${HOME%`touch MARK`}",
    "echo ${HOME#[`touch MARK`]}",
    "echo ${HOME##$(touch MARK)}",
    "grep x ${HOME^`touch MARK`}",
    "grep x ${PWD,,`touch MARK`}",
    "echo \"${@-'`touch MARK`']}\"",
    'echo "${PWD/#`touch MARK`}"',
    "grep x ${PWD/#`touch MARK`}",
    "grep x ${HOME,,`touch MARK`}",
    "cat <<< ${PWD##`touch MARK`}",
    "echo [${HOME%$(touch MARK)}]",
    "echo ${HOME#$( touch MARK )}",
    'echo "${PWD/%<(touch MARK)}"',
    "cat <<< ${PWD%$(touch MARK)}",
    'echo "${PWD,,<(touch MARK)}"',
    'echo "${HOME/#`touch MARK`}"',
    "grep x ${HOME^<(touch MARK)}",
    "grep x ${HOME#$(touch MARK)}",
    "grep x ${PWD^^`touch MARK`x}",
    "echo ${PWD%%$( touch MARK )}",
    "grep x ${HOME^^`touch MARK`}",
    "grep x ${HOME#<(touch MARK)}",
    "cat <<< ${HOME^<(touch MARK)}",
    "grep x [${PWD^^`touch MARK`}]",
    "echo ${HOME,,$( touch MARK )}",
    'echo "${HOME%%$(touch MARK)}"',
    "grep x ${PWD%$( touch MARK )}",
    "grep x ${HOME,,<(touch MARK)}",
    "grep x ${HOME%%$(touch MARK)}",
    "grep x ${HOME^^`touch MARK`*}",
    'echo "${HOME%%<(touch MARK)}"',
    'echo ${PWD%""<(touch MARK)""}',
    "grep x ${HOME,[`touch MARK`]}",
    'echo "${HOME,[`touch MARK`]}"',
    'echo "${HOME/#`touch MARK`*}"',
    "cat <<< ${HOME##`touch MARK`}",
    'echo "${HOME##$(touch MARK)}"',
    'echo "${HOME##$(touch MARK)}*"',
    "grep x ${HOME%[<(touch MARK)]}",
    'grep x ${PWD%%$"`touch MARK`"}',
    "cat <<< ${HOME%%<(touch MARK)}",
    'grep x "${HOME/#`touch MARK`}"',
    "cat <<< [${PWD%%`touch MARK`}]",
    "grep x ${PWD%%\\[`touch MARK`]}",
    'cat <<< "${PWD##`touch MARK`}"',
    "grep x ${PWD,,[<(touch MARK)]}",
    'echo ${HOME%%["`touch MARK`"]}',
    "cat <<< ${HOME,[`touch MARK`]}",
    'echo "${HOME^$( touch MARK )}"',
    "echo \"'${PWD/#<(touch MARK)}'\"",
    "grep x ${PWD##$( touch MARK )}",
    "cat <<< [${PWD##$(touch MARK)}]",
    'echo "${HOME%%$"`touch MARK`"}"',
    "cat <<< ${PWD%$( touch MARK )x}",
    "echo [${HOME#$( touch MARK )}]]",
    "cat <<< ${PWD,,$(touch MARK)*x}",
    "grep x [${HOME/%<(touch MARK)}]",
    "echo ${HOME,,[$( touch MARK )]}",
    'echo "${HOME/%[$(touch MARK)]}"',
    'echo "${PWD%[$"`touch MARK`"]}"',
    'echo "\'"${PWD%$(touch MARK)}"]\'"',
    'echo ""${HOME##$(touch MARK)}"x"',
    "echo \"'${PWD,,$( touch MARK )}'\"",
    "echo \"${PWD:+'$( touch MARK )'}\"",
    'echo "${1-${PWD%$(touch MARK)}}"',
    'echo "[[${HOME/#`touch MARK`}]]"',
    "cat <<< ${HOME,,$( touch MARK )}",
    "echo ${PWD^^\\${@%$(touch MARK)}}",
    'echo ${HOME^^$"$"`touch MARK`""}',
    "grep x [${HOME##<(touch MARK)}]x",
    "cat <<< ${PWD,[$( touch MARK )]}",
    'echo "${PWD,,[$"`touch MARK`"]}"',
    "grep x ${*?${PWD^^<(touch MARK)}}",
    'cat <<< ""${HOME%%`touch MARK`}""',
    'cat <<< "\\\\${HOME^$(touch MARK)}"',
    'echo "\'"${HOME/#<(touch MARK)}"\'"',
    "cat <<< ${PWD/%[$( touch MARK )]}",
    "cat <<< [${HOME/#<(touch MARK)}x]",
    "grep x [${HOME,,$( touch MARK )}]",
    "cat <<EOF\n${PWD,`touch MARK`}\nEOF",
    "cat <<< [${HOME#$( touch MARK )}]",
    'echo "${PWD^${1}$( touch MARK )}"',
    "grep x ${PWD,$'$'<(touch MARK)''}",
    "ls ${PWD^`touch MARK`} 2>/dev/null",
    "cat <<EOF\n${PWD%%`touch MARK`}\nEOF",
    'cat <<< ${PWD,,${*}"`touch MARK`"}',
    'echo "$"${HOME,,$( touch MARK )}""',
    'echo "$"${HOME##$( touch MARK )}""',
    'echo "${HOME#$"$"$(touch MARK)""}"',
    'cat <<< "${PWD#[$( touch MARK )]}"',
    'echo [${HOME/#$"$( touch MARK )"}]',
    'echo "\\$"${PWD/%[$(touch MARK)]}""',
    "grep x ${HOME,$'$'<(touch MARK)''}",
    "echo \"\\\\${HOME:+$'$(touch MARK)'}\"",
    'echo ""${PWD##$"[`touch MARK`]"}""',
    "echo ${PWD^[${x-$( touch MARK )}]}",
    "echo \"$'[${PWD#$( touch MARK )}]'\"",
    'grep x \\$"${HOME^$( touch MARK )}"',
    "echo ${PWD+[${PWD%<(touch MARK)}]}",
    'echo "${HOME/#$"[`touch MARK`*]"}"',
    'grep x ${PWD,,[$"[`touch MARK`]"]}',
    'echo "${HOME##$"$( touch MARK )"}"',
    'echo "[${PWD#$"$( touch MARK )"}]"',
    "ls ${PWD%$(touch MARK)} 2>/dev/null",
    'cat <<< ${PWD%"$"$( touch MARK )""}',
    "ls ${PWD#$(touch MARK)} 2>/dev/null",
    "ls ${PWD#<(touch MARK)} 2>/dev/null",
    "echo ${PWD%[${PWD}$( touch MARK )]}",
    "ls ${PWD/%`touch MARK`} 2>/dev/null",
    "echo ${PWD^^${PWD:+$(touch MARK)*}}",
    "grep x [${PWD/%${x?$(touch MARK)}}]",
    "cat <<EOF\n${*:-$'`touch MARK`'}\nEOF",
    "echo ${PWD/a/${PWD##`touch MARK`}]}",
    "grep x ${PWD^[$''$( touch MARK )'']}",
    "ls ${PWD##<(touch MARK)} 2>/dev/null",
    "cat <<< $'[$'${PWD/%`touch MARK`}']'",
    'cat <<EOF\n${PWD,$"`touch MARK`"}\nEOF',
    "ls ${PWD^^$(touch MARK)} 2>/dev/null",
    "ls ${HOME^^`touch MARK`} 2>/dev/null",
    "cat <<< ${HOME/#[${x=`touch MARK`}]}",
    "cat <<EOF\n${HOME,,`touch MARK`}x\nEOF",
    "cat <<< ${HOME##${@:-$(touch MARK)}}",
    "grep x ${PWD%%${PWD,,<(touch MARK)}}",
    "ls ${HOME%<(touch MARK)} 2>/dev/null",
    "ls ${PWD,,[`touch MARK`]} 2>/dev/null",
    'echo "${PWD%%\\${1:+$( touch MARK )}}"',
    "ls ${HOME^^$(touch MARK)} 2>/dev/null",
    "grep x ${HOME/%${PWD%%<(touch MARK)}}",
    "ls ${HOME/%<(touch MARK)} 2>/dev/null",
    "ls ${HOME##<(touch MARK)} 2>/dev/null",
    "cat <<< ${PWD##${HOME^<(touch MARK)}}",
    "cat <<< ${HOME/%${PWD%%`touch MARK`}}",
    "ls ${HOME%%<(touch MARK)} 2>/dev/null",
    "grep x ${HOME#${PWD/#$(touch MARK)x}}",
    "ls ${PWD%[<(touch MARK)]} 2>/dev/null",
    "cat <<EOF\n${HOME/%[`touch MARK`]}\nEOF",
    'echo "${PWD^${PWD^^$( touch MARK )}*}"',
    'ls "${HOME^`touch MARK`*}" 2>/dev/null',
    "echo \"'${PWD##$\"$'$( touch MARK )'\"}'\"",
    "grep x \\${HOME/a/${PWD^$(touch MARK)}}",
    "ls [${PWD%%<(touch MARK)}] 2>/dev/null",
    "ls ${HOME%$( touch MARK )} 2>/dev/null",
    'echo "${x?[[${HOME,,$(touch MARK)}]]}"',
    'cat <<< ${HOME,,$"\\[$( touch MARK )]"}',
    'cat <<EOF\n${PWD^[["`touch MARK`"]]}\nEOF',
    "cat <<< ${HOME/%${HOME,,$(touch MARK)}}",
    "grep x ${PWD#${PWD/a/[[`touch MARK`]]}}",
    "cat <<< ${HOME#\"${*:-$'`touch MARK`'}\"}",
    "echo \"$\"'$'${HOME^^$( touch MARK )}''\"\"",
    "cat <<EOF\n${HOME##${*}`touch MARK`}\nEOF",
    "ls ${HOME##[$(touch MARK)]} 2>/dev/null",
    "cat <<< '${@+$'${PWD##<(touch MARK)}'}'",
    'echo "${PWD^^$"\'${@:-$(touch MARK)}\'"}"',
    'grep x ${PWD^^${PWD+$"$(touch MARK)"}*}',
    'cat <<< ${HOME%%[$""$( touch MARK )""]}',
    'ls "${PWD,,[`touch MARK`]}" 2>/dev/null',
    "echo \"$'${PWD+${HOME%%$(touch MARK)}}'\"",
    "cat <<< ${PWD%%${PWD:0:$( touch MARK )}}",
    'cat <<EOF\n[${PWD,$"$( touch MARK )"}]\nEOF',
    'ls "${PWD^^$( touch MARK )}"* 2>/dev/null',
    'ls ${PWD##\\[$"`touch MARK`"]} 2>/dev/null',
    "ls ${1-${HOME,,`touch MARK`}} 2>/dev/null",
    "ls ${PWD^^$\"'$(touch MARK)'\"} 2>/dev/null",
    "cat <<< \"$'${HOME,${PWD^^`touch MARK`}}'\"",
    "ls ${PWD##${@?[`touch MARK`]}} 2>/dev/null",
    "cat <<EOF\n${PWD%${PWD^^`touch MARK`}x}\nEOF",
    'cat <<< ${HOME##$"${HOME/#`touch MARK`}"}x',
    "ls \"$''${PWD#<(touch MARK)}''\" 2>/dev/null",
    "cat <<EOF\n${@:?${PWD%%[<(touch MARK)]}}\nEOF",
    'ls ${HOME%%[[$"`touch MARK`"]]} 2>/dev/null',
    "cat <<EOF\n${PWD,,[$\"$'$(touch MARK)'\"]}\nEOF",
    "ls ${x}${HOME##$( touch MARK )} 2>/dev/null",
    "ls ${PWD,,${PWD,<(touch MARK)}} 2>/dev/null",
    "ls $'['${HOME%%$(touch MARK)}']' 2>/dev/null",
    'ls [[${HOME/#$"$(touch MARK)"}]] 2>/dev/null',
    "cat <<< [${*}${HOME,,${HOME/%`touch MARK`}}]",
    "cat <<EOF\n${*-$'\\${HOME%%`touch MARK`}'}\nEOF",
    "cat <<< [${HOME##${HOME//a/[<(touch MARK)]}}]",
    "ls ${PWD^${HOME,,[`touch MARK`]}} 2>/dev/null",
    "ls [${HOME^[${x=<(touch MARK)}]}] 2>/dev/null",
    "ls ${HOME,,$\"$'$( touch MARK )'\"} 2>/dev/null",
    'echo "${HOME//a/${HOME%$"$"<(touch MARK)""}}"',
    "ls \"${x?$'${HOME%%`touch MARK`}'}\" 2>/dev/null",
    "ls [\\${PWD}${HOME^^$(touch MARK)}] 2>/dev/null",
    "cat <<< ${PWD^\\${x:=${HOME/#$( touch MARK )}}}",
    "ls ${HOME##\\${x:=$( touch MARK )}} 2>/dev/null",
    "ls [${PWD#${HOME/#$(touch MARK)}}]x 2>/dev/null",
    "cat <<EOF\n${x:-${HOME/#\\${HOME%%$(touch MARK)}}}\nEOF",
    'cat <<EOF\n${PWD}${HOME,,$"${x:=$( touch MARK )}"}\nEOF',
)


def test_the_list_is_complete() -> None:
    assert len(set(HOLES)) == len(HOLES) == 196


@pytest.mark.parametrize("command", HOLES, ids=[repr(h)[1:-1][:50] for h in HOLES])
def test_a_substitution_hidden_in_an_expansion_is_never_read_only(command: str, ws: Path) -> None:
    verdict = explain_shell_command(command, ws)
    assert classify_shell_command(command, ws) != "read-only", verdict.reason
    assert verdict.reason


def test_most_holes_are_seen_to_write(ws: Path) -> None:
    # The inner command is a visible `touch`: the walker re-reads the operand
    # and finds it, rather than stopping at doubt.
    writes = sum(classify_shell_command(command, ws) == "write" for command in HOLES)
    assert writes >= 0.9 * len(HOLES)
