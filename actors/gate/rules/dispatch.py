"""Which rule judges a simple command: the command tables and the dispatch.

The entry points the tree walker calls: :func:`classify_simple_command` for a
command and its arguments, :func:`environment_assignment` for a
``NAME=value`` before it, :func:`command_name` for the name the rules judge.
A command is read-only only when it is on an allowlist here *and* its
arguments pass its rule (:data:`ARGUMENT_RULES`, from the family modules);
shells (``bash -c``), ``eval`` and wrappers are judged here because they run
other commands, which they classify through ``nested``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

from fore.actors.gate.rules.awk import AWK_RULES
from fore.actors.gate.rules.coreutils import COREUTILS_RULES, WRITE_ROOTS
from fore.actors.gate.rules.git import GIT_RULES
from fore.actors.gate.rules.sed import SED_RULES
from fore.actors.gate.rules.verdict import (
    DYNAMIC,
    Nested,
    Verdict,
    read_only,
    unknown,
    worst,
    write,
)

# ---------------------------------------------------------------------------
# Command tables
# ---------------------------------------------------------------------------

PLAIN_READ_ONLY: frozenset[str] = frozenset(
    {
        # file contents
        "cat", "head", "tail", "wc", "nl", "tac", "rev", "od", "hexdump", "strings",
        "cut", "tr", "fold", "fmt", "expand", "unexpand", "paste", "column", "comm",
        "cmp", "diff",
        "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum",
        "b2sum", "cksum",
        # searching and listing
        "grep", "egrep", "fgrep", "ls", "stat", "du", "df", "realpath", "readlink",
        "basename", "dirname", "pwd", "which", "type",
        # printing and the environment
        "echo", "printf", "printenv", "whoami", "id", "uname", "nproc", "seq",
        "true", "false", "numfmt",
    }
)  # fmt: skip
"""Commands with no option that writes a file or runs another program."""

DIRECTORY_CHANGES: frozenset[str] = frozenset({"cd", "pushd", "popd"})
"""Change only the shell's own directory; git after them is not probed."""


WRAPPERS: frozenset[str] = frozenset(
    {
        "env", "xargs", "sudo", "doas", "su", "nice", "nohup", "timeout", "time",
        "command", "builtin", "exec", "stdbuf", "ionice", "chroot", "setsid",
        "watch", "strace", "ltrace", "parallel", "flock", "unbuffer", "nsenter",
    }
)  # fmt: skip
"""Commands that run another command: never read-only, ``write`` if it is visible."""

SHELLS: frozenset[str] = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "busybox"})

SCRIPT_SHELLS: frozenset[str] = frozenset({"sh", "bash", "zsh", "dash"})
"""Shells whose ``-c SCRIPT`` is classified like the script itself (busybox is many programs)."""

_SHELL_SAFE_LETTERS = frozenset("clexu")
"""``-c`` script, ``-l`` login shell (the user's own profile), ``-e``/``-x``/``-u`` (errexit,
trace to stderr, nounset): none of them runs anything the script does not."""
_SHELL_SAFE_LONG = frozenset({"--login", "--noprofile", "--norc"})
_SHELL_SAFE_SETTINGS = frozenset({"pipefail", "errexit", "nounset", "xtrace"})

HARMLESS_ENVIRONMENT: dict[str, re.Pattern[str]] = {
    **dict.fromkeys(
        (
            "LC_ALL", "LC_COLLATE", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME",
            "LC_MONETARY", "LANG",
        ),
        re.compile(r"|[A-Za-z][A-Za-z0-9_@-]*(?:\.[A-Za-z0-9_@-]+)?"),
    ),
    "LANGUAGE": re.compile(r"[A-Za-z][A-Za-z0-9_@-]*(?::[A-Za-z][A-Za-z0-9_@-]*)*|"),
    "TZ": re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*|"),
    "COLUMNS": re.compile(r"[0-9]{1,5}"),
    "LINES": re.compile(r"[0-9]{1,5}"),
    "TABSIZE": re.compile(r"[0-9]{1,3}"),
    **dict.fromkeys(
        ("NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "TERM", "QUOTING_STYLE"),
        re.compile(r"[A-Za-z0-9_+-]*"),
    ),
    **dict.fromkeys(
        ("GREP_COLOR", "GREP_COLORS", "LS_COLORS", "TIME_STYLE"),
        re.compile(r"[A-Za-z0-9_=:;,.%+ -]*"),
    ),
    **dict.fromkeys(
        ("BLOCK_SIZE", "BLOCKSIZE", "DF_BLOCK_SIZE", "DU_BLOCK_SIZE", "LS_BLOCK_SIZE"),
        re.compile(r"[A-Za-z0-9',]*"),
    ),
}  # fmt: skip
"""Variables a ``NAME=value`` may set, with the values allowed: locale, time zone, width,
colour. Everything else is doubt -- ``LD_PRELOAD``, ``PATH``, ``BASH_ENV``, ``GIT_*``,
``PAGER``, ``IFS``, ``GCONV_PATH``, ``GLIBC_TUNABLES`` ... load or run code, and
``POSIXLY_CORRECT`` or ``TMPDIR`` change what the option and path models assume. Values
are held to names: no ``/`` or ``..`` that could point a locale or zone file elsewhere."""


def environment_assignment(name: str, value: str | None) -> Verdict:
    """Whether ``name=value`` (before a command, or on its own) is harmless."""
    allowed = HARMLESS_ENVIRONMENT.get(name)
    if allowed is None:
        return unknown(f"setting {name} can change what commands run or read")
    if value is None:
        return unknown(f"{name} is set to a value only known at run time")
    if not allowed.fullmatch(value) or ".." in value:
        return unknown(f"{name}={value!r} is not a plain value")
    return read_only(f"{name} only sets a locale, zone, width or colour")


ARGUMENT_RULES: dict[str, Callable[[Sequence[str]], Verdict]] = {
    **COREUTILS_RULES,
    **SED_RULES,
    **GIT_RULES,
    **AWK_RULES,
}
"""Allowlisted commands whose arguments decide; run-time expansions in them are doubt."""


def _shell_rule(name: str, args: Sequence[str | None], nested: Nested) -> Verdict:
    """``bash -c SCRIPT``: as harmless as the script, when nothing else can run.

    Only ``-c`` with a literal script, and the options in
    :data:`_SHELL_SAFE_LETTERS`/:data:`_SHELL_SAFE_LONG` (``-l`` sources the
    user's own profile, as the user's terminal does) are understood; a script
    file, ``-i`` (rc files), ``-O``/``+O`` and anything else is doubt, and so
    is ``BASH_ENV`` in the environment (a file bash sources first).
    """
    floor = unknown(f"{name} runs a shell script")
    script: str | None = None
    command_mode = False
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg is None:
            return floor
        if arg in _SHELL_SAFE_LONG:
            continue
        if arg == "-o" and index < len(args) and args[index] in _SHELL_SAFE_SETTINGS:
            index += 1
            continue
        if arg.startswith("-") and len(arg) > 1 and not arg.startswith("--"):
            if not set(arg[1:]) <= _SHELL_SAFE_LETTERS:
                return unknown(f"{name} option {arg!r} is not understood")
            command_mode = command_mode or "c" in arg
            continue
        script = arg
        break
    if not command_mode or script is None:
        return floor
    inner = nested(script)
    if name not in SCRIPT_SHELLS or "BASH_ENV" in os.environ:
        return worst(floor, inner)
    return worst(read_only(f"{name} -c runs a read-only script"), inner)


def _wrapper_rule(name: str, args: Sequence[str | None]) -> Verdict:
    for arg in args:
        if arg is not None and os.path.basename(arg) in WRITE_ROOTS:
            return write(f"{name} runs {arg}, which changes files")
    return unknown(f"{name} runs another command")


SYSTEM_DIRECTORIES: frozenset[str] = frozenset({"/usr/bin", "/bin"})
"""Where ``/usr/bin/rg`` is the system's ``rg``: only root can put a program there."""


def command_name(name: str) -> str:
    """The name the rules judge: ``/usr/bin/cat`` and ``/bin/cat`` are ``cat``."""
    directory, _, base = name.rpartition("/")
    if directory in SYSTEM_DIRECTORIES and base:
        return base
    return name


def classify_simple_command(name: str, args: Sequence[str | None], nested: Nested) -> Verdict:
    """Classify one simple command from its literal name and its arguments.

    ``args`` holds ``None`` for an argument only known at run time. ``nested``
    classifies a command string this command would itself run (``bash -c``,
    ``eval``) so a write hidden in there still counts as a write.
    """
    name = command_name(name)
    if "/" in name:
        base = os.path.basename(name)
        if base in WRITE_ROOTS:
            return write(f"{base} changes files")
        return unknown(f"{name!r} is run by path, not from the allowlist")
    if name in WRITE_ROOTS:
        return write(f"{name} changes files")
    rule = ARGUMENT_RULES.get(name)
    if rule is not None:
        verdict = rule([DYNAMIC if arg is None else arg for arg in args])
        if any(arg is None for arg in args):
            return worst(
                verdict, unknown(f"{name} has a shell expansion among arguments it checks")
            )
        return verdict
    if name == "printf" and args and (args[0] is None or args[0].startswith("-v")):
        return unknown("printf -v assigns a shell variable")
    if name in PLAIN_READ_ONLY:
        return read_only(f"{name} only reads")
    if name in DIRECTORY_CHANGES:
        return read_only(f"{name} changes only the shell's directory")
    if name in SHELLS:
        return _shell_rule(name, args, nested)
    if name == "eval":
        floor = unknown("eval runs its arguments as a command")
        if any(arg is None for arg in args):
            return floor
        return worst(floor, nested(" ".join(arg for arg in args if arg is not None)))
    if name in WRAPPERS:
        return _wrapper_rule(name, args)
    return unknown(f"{name!r} is not on the read-only allowlist")
