"""The rules for ``git``: read-only subcommands, listing forms, and the paths git opens.

git is one command with many subcommands, each with its own options that may
write a file (``--output``) or run a program (``--ext-diff``, gpg through
signature placeholders); ``git branch``/``git tag`` only list in some forms.
:func:`git_paths` tells the scope check which files a read-only git command
opens. The git *configuration* (aliases, hooks, submodules) is a separate
question, answered by :mod:`fore.actors.gate.git_config`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fore.actors.gate.rules.options import before_terminator
from fore.actors.gate.rules.verdict import DYNAMIC, Verdict, read_only, unknown, write

GIT_READ_ONLY: frozenset[str] = frozenset(
    {
        "status", "log", "diff", "show", "blame", "grep", "ls-files", "rev-parse",
        "describe", "cat-file", "shortlog", "ls-tree", "rev-list", "show-ref",
        "for-each-ref", "merge-base", "name-rev", "count-objects", "diff-tree",
        "diff-index", "diff-files", "check-ignore", "check-attr", "whatchanged",
        "cherry", "show-branch", "version",
    }
)  # fmt: skip

GIT_WRITES: frozenset[str] = frozenset(
    {
        "add", "am", "apply", "bisect", "checkout", "cherry-pick", "clean", "clone",
        "commit", "commit-tree", "fetch", "filter-branch", "format-patch", "gc", "init",
        "merge", "mv", "notes", "prune", "pull", "push", "rebase", "reset", "restore",
        "revert", "rm", "switch", "update-index", "update-ref", "submodule",
        "sparse-checkout", "replace", "repack", "pack-refs", "checkout-index",
        "read-tree", "write-tree", "mktag", "mktree", "fast-import", "maintenance",
        "bundle", "worktree", "stash", "tag", "branch", "remote", "reflog",
    }
)  # fmt: skip
"""Subcommands that change the repository (the listing forms are handled first)."""

_GIT_OUTPUT = "--output"
_GIT_RUNS_PROGRAMS = (
    "--ext-diff",
    "--textconv",
    "--show-signature",
    "--open-files-in-pager",
    "--filters",
    "--help",
)
_GIT_EXACT_SAFE = frozenset({"--text"})  # real options that prefix a dangerous one


def _git_long_matches(name: str, target: str) -> bool:
    # git's option parser accepts unique abbreviations: ``--ext`` is ``--ext-diff``.
    if name == target:
        return True
    return len(name) >= 3 and target.startswith(name) and name not in _GIT_EXACT_SAFE


_GIT_REMERGE = re.compile(r"--remerge-diff|--diff-merges(?:=(?:r|remerge))?$")


def _git_arguments(subcommand: str, args: Sequence[str]) -> Verdict:
    """Options of a read-only git subcommand that write files or run programs."""
    options = before_terminator(args)
    for index, arg in enumerate(options):
        if arg.startswith("--"):
            name = arg.partition("=")[0]
            if _GIT_REMERGE.match(arg) and (
                "=" in arg
                or name == "--remerge-diff"
                or (index + 1 < len(options) and options[index + 1] in ("r", "remerge"))
            ):
                return unknown(
                    f"git {subcommand} {arg} re-runs merges (merge drivers, temp objects)"
                )
            if name == "--no-index" and subcommand != "diff":
                return unknown(f"git {subcommand} --no-index reads files outside the repository")
            if _git_long_matches(name, _GIT_OUTPUT):
                return write(f"git {subcommand} {name} writes a file")
            for target in _GIT_RUNS_PROGRAMS:
                if _git_long_matches(name, target):
                    return unknown(f"git {subcommand} {target} runs other programs")
        elif arg.startswith("-") and subcommand == "grep" and "O" in arg:
            return unknown("git grep -O opens files in a pager")
        if _runs_gpg(arg):
            return unknown("signature placeholders run gpg")
    return read_only(f"git {subcommand} only reads")


_GPG_PLACEHOLDER = re.compile(r"%G|%\(\*?signature")


def _runs_gpg(arg: str) -> bool:
    """Whether ``arg`` holds a format placeholder that verifies a signature with gpg.

    ``%G?``/``%GS``... in ``--format``/``--pretty``, and the ``for-each-ref``
    atoms ``%(signature...)`` -- also dereferenced, ``%(*signature)`` -- which
    ``git branch``/``git tag``/``git for-each-ref --format`` accept alike.
    """
    return _GPG_PLACEHOLDER.search(arg) is not None


_BRANCH_LIST_FLAGS = frozenset(
    {
        "--all", "--remotes", "--verbose", "--list", "--show-current", "--no-color",
        "--color", "--no-column", "--column", "--ignore-case", "--omit-empty",
        "--no-abbrev", "--abbrev", "--quiet",
    }
)  # fmt: skip
_BRANCH_FILTERS = frozenset(
    {"--contains", "--no-contains", "--merged", "--no-merged", "--points-at"}
)
_BRANCH_WITH_ARG = _BRANCH_FILTERS | {"--sort", "--format"}


@dataclass(frozen=True, slots=True)
class _ListingForm:
    """The options of ``git branch`` or ``git tag`` that keep it a listing."""

    what: str
    flags: frozenset[str]
    with_arg: frozenset[str]
    short_list: str
    short_ok: str
    write_long: frozenset[str]
    write_short: str
    filters: frozenset[str] = _BRANCH_FILTERS
    verify_long: frozenset[str] = frozenset()
    verify_short: str = ""


def _git_listing(form: _ListingForm, args: Sequence[str]) -> Verdict:
    """``git branch`` / ``git tag``: read-only only in their listing forms.

    A positional operand lists only under ``--list`` or a filter option
    (``--contains``, ``--merged`` ...); otherwise ``git branch NAME`` creates.
    """
    what = form.what
    if any(_runs_gpg(arg) for arg in args):
        return unknown(f"git {what}: signature placeholders run gpg")
    listing = False
    operands: list[str] = []
    doubt: Verdict | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            operands.extend(args[i:])
            break
        if arg.startswith("--"):
            name, has_value, _ = arg.partition("=")
            if name in form.write_long:
                return write(f"git {what} {name} changes the repository")
            if name in form.verify_long:
                return unknown(f"git {what} {name} runs gpg")
            if name == "--list":
                listing = True
            elif name in form.with_arg:
                listing = listing or name in form.filters
                if not has_value and i < len(args):
                    i += 1
            elif name not in form.flags:
                doubt = doubt or unknown(f"git {what} {name} is not a listing option")
        elif arg.startswith("-") and arg != "-":
            letters = arg[1:]
            if what == "tag" and letters.startswith("n") and letters[1:] in ("", *"0123456789"):
                continue
            for letter in letters:
                if letter in form.write_short:
                    return write(f"git {what} -{letter} changes the repository")
                if letter in form.verify_short:
                    return unknown(f"git {what} -{letter} runs gpg")
                if letter in form.short_list:
                    listing = True
                elif letter not in form.short_ok:
                    doubt = doubt or unknown(f"git {what} -{letter} is not a listing option")
        else:
            operands.append(arg)
    if operands and not listing:
        return write(f"git {what} NAME creates a {what}")
    return doubt or read_only(f"git {what} lists")


_BRANCH_FORM = _ListingForm(
    what="branch",
    flags=_BRANCH_LIST_FLAGS,
    with_arg=_BRANCH_WITH_ARG,
    short_list="l",
    short_ok="arvqi",
    write_long=frozenset(
        {
            "--delete", "--move", "--copy", "--force", "--set-upstream-to",
            "--unset-upstream", "--edit-description", "--track", "--no-track",
            "--create-reflog", "--recurse-submodules",
        }
    ),
    write_short="dDmMcCfut",
)  # fmt: skip

_TAG_FORM = _ListingForm(
    what="tag",
    flags=frozenset({"--no-column", "--column", "--ignore-case", "--color", "--omit-empty"}),
    with_arg=_BRANCH_WITH_ARG,
    short_list="l",
    short_ok="i",
    write_long=frozenset(
        {
            "--annotate", "--sign", "--no-sign", "--local-user", "--force", "--delete",
            "--message", "--file", "--edit", "--cleanup", "--create-reflog", "--trailer",
        }
    ),
    write_short="asufdmFe",
    verify_long=frozenset({"--verify"}),
    verify_short="v",
)  # fmt: skip


def _git_branch(args: Sequence[str]) -> Verdict:
    return _git_listing(_BRANCH_FORM, args)


def _git_tag(args: Sequence[str]) -> Verdict:
    return _git_listing(_TAG_FORM, args)


_REMOTE_WRITES = frozenset(
    {"add", "rename", "remove", "rm", "set-head", "set-branches", "set-url", "prune", "update"}
)


_REMOTE_SHOW_LOCAL = frozenset({"-n", "--no-query", "-v", "--verbose"})


def _git_remote(args: Sequence[str]) -> Verdict:
    rest = list(args)
    while rest and rest[0] in ("-v", "--verbose"):
        rest.pop(0)
    if not rest:
        return read_only("git remote lists the remotes")
    action, options = rest[0], rest[1:]
    if action in _REMOTE_WRITES:
        return write(f"git remote {action} changes the repository's remotes")
    operands = [arg for arg in options if not arg.startswith("-")]
    flags = {arg for arg in options if arg.startswith("-")}
    if action == "get-url" and flags <= {"--push", "--all"} and len(operands) <= 1:
        return read_only("git remote get-url prints a URL")
    if action == "show" and flags & {"-n", "--no-query"} and flags <= _REMOTE_SHOW_LOCAL:
        return read_only("git remote show -n reads the local configuration")
    if action == "show":
        return unknown("git remote show contacts the remote (use -n)")
    return unknown(f"git remote {action} is not a listing form")


def _git_stash(args: Sequence[str]) -> Verdict:
    if args and args[0] in ("list", "show"):
        return _git_arguments(f"stash {args[0]}", args[1:])
    return write("git stash changes the working tree and refs")


def _git_worktree(args: Sequence[str]) -> Verdict:
    if args and args[0] == "list":
        return read_only("git worktree list lists")
    if not args:
        return unknown("git worktree without a subcommand")
    return write(f"git worktree {args[0]} changes worktrees")


def _git_reflog(args: Sequence[str]) -> Verdict:
    if not args:
        return read_only("git reflog shows the reflog")
    if args[0] in ("expire", "delete", "drop"):
        return write(f"git reflog {args[0]} rewrites the reflog")
    if args[0] == "show":
        return _git_arguments("reflog show", args[1:])
    if args[0] == "exists":
        return read_only("git reflog exists only checks")
    if args[0].startswith("-"):
        return _git_arguments("reflog", args)
    return unknown(f"git reflog {args[0]} is not understood")


_GIT_SPECIAL: dict[str, Callable[[Sequence[str]], Verdict]] = {
    "branch": _git_branch,
    "tag": _git_tag,
    "remote": _git_remote,
    "stash": _git_stash,
    "worktree": _git_worktree,
    "reflog": _git_reflog,
}


GIT_SAFE_GLOBAL_OPTIONS: frozenset[str] = frozenset({"-P", "--no-pager", "--no-optional-locks"})
"""Options before the git subcommand that only make git do less: no pager, no index refresh."""


def _git_global(args: Sequence[str]) -> tuple[int, list[str]]:
    """Skip git's harmless global options; return where the subcommand is and the ``-C`` dirs."""
    index = 0
    directories: list[str] = []
    while index < len(args):
        arg = args[index]
        if arg in GIT_SAFE_GLOBAL_OPTIONS:
            index += 1
        elif arg == "-C" and index + 1 < len(args):
            directories.append(args[index + 1])
            index += 2
        else:
            break
    return index, directories


def _git_rule(args: Sequence[str]) -> Verdict:
    index, _ = _git_global(args)
    if index >= len(args):
        return unknown("git without a subcommand")
    subcommand, rest = args[index], args[index + 1 :]
    if subcommand == "--version" and set(rest) <= {"--build-options"}:
        return read_only("git --version prints git's version")
    if subcommand.startswith("-"):
        return unknown(f"git option {subcommand!r} before the subcommand")
    special = _GIT_SPECIAL.get(subcommand)
    if special is not None:
        return special(rest)
    if subcommand in GIT_READ_ONLY:
        return _git_arguments(subcommand, rest)
    if subcommand in GIT_WRITES:
        return write(f"git {subcommand} changes the repository")
    return unknown(f"git {subcommand!r} is not a known read-only subcommand")


@dataclass(slots=True)
class GitPaths:
    """What a git command opens: ``-C`` directories (in order) and file arguments."""

    directories: list[str]
    paths: list[str]


_GIT_DIFF_FAMILY = frozenset(
    {"diff", "log", "show", "diff-tree", "diff-index", "diff-files", "whatchanged"}
)
_GIT_FILE_OPTIONS: dict[str, tuple[str, frozenset[str]]] = {
    # subcommand: (short letters whose value is a file, long options whose value is a file)
    **dict.fromkeys(_GIT_DIFF_FAMILY, ("O", frozenset({"--orderfile"}))),
    "ls-files": ("X", frozenset({"--exclude-from"})),
    "grep": ("f", frozenset({"--file"})),
    "blame": ("S", frozenset({"--contents", "--ignore-revs-file"})),
}


def git_paths(args: Sequence[str]) -> tuple[GitPaths, str | None]:
    """The paths a read-only git command opens, and doubt (None: none).

    Pathspecs and revisions are not paths here: git refuses a pathspec
    outside its repository. ``git diff`` is the exception -- with a path
    outside the work tree it falls back to ``--no-index`` and prints any two
    files -- so its operands are paths. ``DYNAMIC`` arguments are skipped (the
    caller has refused them already).
    """
    index, directories = _git_global(args)
    found = GitPaths(directories, [])
    if index >= len(args):
        return found, None
    subcommand, rest = args[index], list(args[index + 1 :])
    shorts, longs = _GIT_FILE_OPTIONS.get(subcommand, ("", frozenset()))
    options = before_terminator(rest)
    operands = rest[len(options) + 1 :] if len(options) < len(rest) else []
    i = 0
    while i < len(options):
        arg = options[i]
        i += 1
        if arg.startswith("--"):
            name, has_value, value = arg.partition("=")
            if name == "--pathspec-from-file":
                return found, f"git {subcommand} {name} reads a list of paths the check cannot see"
            if name in longs:
                if has_value:
                    found.paths.append(value)
                elif i < len(options):
                    found.paths.append(options[i])
                    i += 1
        elif arg.startswith("-") and len(arg) > 1:
            for position, letter in enumerate(arg[1:], start=1):
                if letter in shorts:
                    if position + 1 < len(arg):
                        found.paths.append(arg[position + 1 :])
                    elif i < len(options):
                        found.paths.append(options[i])
                        i += 1
                    break
        elif subcommand == "diff":
            found.paths.append(arg)
    if subcommand == "diff":
        found.paths.extend(operands)
    found.paths = [path for path in found.paths if path != DYNAMIC]
    return found, None


GIT_RULES: dict[str, Callable[[Sequence[str]], Verdict]] = {"git": _git_rule}
"""The command of this module, for :data:`~fore.actors.gate.rules.dispatch.ARGUMENT_RULES`."""
