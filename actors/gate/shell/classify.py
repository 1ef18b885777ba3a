"""The shell walk's entry points, its parsing and its statements.

:func:`classify_shell_command` and :func:`explain_shell_command` parse a
command string with tree-sitter, refuse text on which tree-sitter and bash
could disagree, and walk the statements: lists, pipelines, subshells and
groups take the worst of their parts; a simple command is judged by
:mod:`fore.actors.gate.rules`, then its operands are held to the scope rule
(:class:`~fore.actors.gate.scope.Scope`). Redirections and words are walked
by :mod:`.redirects` and :mod:`.words`, which call back into this module for
the statements nested in them.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from functools import lru_cache
from typing import TYPE_CHECKING

import tree_sitter
import tree_sitter_bash

from fore.actors.gate.git_config import program_setting
from fore.actors.gate.path_model import NO_PATHS, path_arguments
from fore.actors.gate.rules import (
    DIRECTORY_CHANGES,
    DYNAMIC,
    Severity,
    Verdict,
    classify_simple_command,
    command_name,
    environment_assignment,
    git_paths,
    read_only,
    unknown,
    worst,
)
from fore.actors.gate.scope import MAX_DIRECTORIES, Scope
from fore.actors.gate.shell.context import (
    _MISLEXED,
    _READ_ONLY,
    MAX_COMMAND_CHARS,
    MAX_NESTED_SOURCES,
    MAX_TREE_NODES,
    _Abort,
    _Context,
    _exact,
    _Word,
)
from fore.actors.gate.shell.redirects import _REDIRECT_TYPES, _redirect
from fore.actors.gate.shell.words import _text, _word

if TYPE_CHECKING:
    from fore.messages.gate import ShellClass

_SHELL_CLASS: dict[Severity, ShellClass] = {
    Severity.READ_ONLY: "read-only",
    Severity.UNKNOWN: "unknown",
    Severity.WRITE: "write",
}

_SEQUENCE_TYPES = frozenset(
    {"program", "list", "pipeline", "subshell", "compound_statement", "negated_command"}
)
_STATEMENT_TYPES = _SEQUENCE_TYPES | {
    "command",
    "redirected_statement",
    "variable_assignment",
    "variable_assignments",
    "declaration_command",
    "unset_command",
    "function_definition",
    "if_statement",
    "while_statement",
    "for_statement",
    "c_style_for_statement",
    "case_statement",
    "test_command",
}
_SEPARATORS = frozenset({";", "&&", "||", "|", "|&", "(", ")", "{", "}", "!", "\n"})
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_GAP = re.compile(rb"(?:[ \t\n]|\\\n)*")
_CONTINUATION = re.compile(r"(?<!\\)((?:\\\\)*)\\\r?\n")
_local = threading.local()


@lru_cache(maxsize=1)
def _language() -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_bash.language())


def _parser() -> tree_sitter.Parser:
    # tree-sitter parsers are not thread-safe: one per thread, made on first use.
    parser: tree_sitter.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = tree_sitter.Parser(_language())
        _local.parser = parser
    return parser


def classify_shell_command(
    command: str,
    workspace: str | os.PathLike[str] | None,
    cwd: str | os.PathLike[str] | None = None,
) -> ShellClass:
    """Classify ``command`` as ``"read-only"``, ``"write"`` or ``"unknown"``.

    Only ``"read-only"`` may run during a speculation. ``workspace`` (required;
    an absolute directory) is what a speculation may read: a command whose
    paths lead outside it is ``"unknown"`` (see :mod:`fore.actors.gate.scope`),
    and git is ``"unknown"`` when the local git config of the repository it
    runs in names programs to run. ``cwd`` is where the command starts
    (default: the workspace; relative to it, or absolute inside it). With
    ``workspace=None`` nothing can be checked: every command that opens a
    path, and every git command, is ``"unknown"``.
    """
    return _SHELL_CLASS[explain_shell_command(command, workspace, cwd).severity]


def explain_shell_command(
    command: str,
    workspace: str | os.PathLike[str] | None,
    cwd: str | os.PathLike[str] | None = None,
) -> Verdict:
    """Like :func:`classify_shell_command`, with the reason for the verdict (one line)."""
    verdict = _explain(command, workspace, cwd)
    if _LINE_BREAKS.search(verdict.reason) is None:
        return verdict
    # A path or word quoted in the reason may hold a newline: the model sees one line.
    reason = _LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], verdict.reason)
    return Verdict(verdict.severity, reason)


_LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")


def _explain(
    command: str,
    workspace: str | os.PathLike[str] | None,
    cwd: str | os.PathLike[str] | None,
) -> Verdict:
    if not isinstance(command, str):
        return unknown("the command is not a string")
    scope = _scope_for(workspace, cwd)
    if isinstance(scope, Verdict):
        return scope
    context = _Context(scope=scope)
    try:
        verdict = _classify_source(command, context)
    except _Abort as exc:
        return unknown(exc.reason)
    except RecursionError:
        return unknown("the command is nested too deeply to check")
    if verdict.severity is Severity.READ_ONLY and context.git_reads:
        if scope is None:
            return unknown("git runs with no workspace given, so its config was not checked")
        directories = sorted(scope.git_directories)
        if len(directories) > MAX_DIRECTORIES:
            return unknown("git runs in too many directories to check their config")
        for directory in directories:
            problem = program_setting(directory)
            if problem is not None:
                return unknown(problem)
    return verdict


def _scope_for(
    workspace: str | os.PathLike[str] | None, cwd: str | os.PathLike[str] | None
) -> Scope | Verdict | None:
    """The scope check for a command run in ``cwd`` inside ``workspace`` (None: no workspace)."""
    if workspace is None:
        return None
    try:
        text = os.fspath(workspace)
        if not isinstance(text, str) or not os.path.isabs(text):
            return unknown(f"the workspace {text!r} is not an absolute directory")
        root = _real_directory(text)
        if root is None:
            return unknown(f"the workspace {text!r} is not a directory")
        start = root if cwd is None else os.path.realpath(os.path.join(root, os.fspath(cwd)))
    except (TypeError, ValueError, OSError) as exc:
        return unknown(f"the workspace cannot be used: {exc}")
    if start != root and not start.startswith(root.rstrip("/") + "/"):
        return unknown(f"the directory {os.fspath(cwd or '')!r} is outside the workspace")
    rel = "" if start == root else start[len(root.rstrip("/")) + 1 :]
    return Scope(root, rel)


_roots: dict[str, tuple[int, int, str]] = {}
_roots_lock = threading.Lock()


def _real_directory(path: str) -> str | None:
    """``realpath(path)`` if it is a directory (None if not), remembered per directory.

    A gate call asks for the same workspace every time; one ``stat`` says it
    is still the directory resolved before (same device and inode), so the
    component-by-component ``realpath`` runs once per workspace, not per call.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    with _roots_lock:
        known = _roots.get(path)
    if known is not None and known[:2] == (st.st_dev, st.st_ino):
        return known[2]
    real = os.path.realpath(path)
    real_st = os.stat(real)
    if (real_st.st_dev, real_st.st_ino) != (st.st_dev, st.st_ino):
        return None  # swapped while we looked: doubt
    with _roots_lock:
        if len(_roots) > 64:
            _roots.clear()
        _roots[path] = (st.st_dev, st.st_ino, real)
    return real


def _classify_source(source: str, context: _Context) -> Verdict:
    context.sources += 1
    if context.sources > MAX_NESTED_SOURCES:
        raise _Abort("the command holds too many nested command strings to check")
    refusal = _refuse_text(source)
    if refusal is not None:
        return refusal
    encoded = source.encode("utf-8")
    tree = _parser().parse(encoded)
    verdict = _classify_tree(tree, encoded, context)
    stripped = _CONTINUATION.sub(r"\1", source)
    if stripped != source:
        # bash joins a backslash-newline before it tokenizes; tree-sitter treats
        # it as a blank. Classify both readings; if they differ in shape, doubt.
        stripped_encoded = stripped.encode("utf-8")
        stripped_tree = _parser().parse(stripped_encoded)
        verdict = worst(verdict, _classify_tree(stripped_tree, stripped_encoded, context))
        if _shape(tree.root_node) != _shape(stripped_tree.root_node):
            verdict = worst(verdict, unknown("a backslash-newline changes how the command parses"))
    return verdict


def _refuse_text(source: str) -> Verdict | None:
    if not source.strip():
        return read_only("the command is empty: nothing runs")
    if len(source) > MAX_COMMAND_CHARS:
        return unknown("the command is too long to check")
    if source.isascii():
        match = _ASCII_CONTROL.search(source)
        return None if match is None else unknown(f"the command contains {match.group()!r}")
    for char in source:
        if char in ("\n", "\t", " "):
            continue
        if char.isspace() or not char.isprintable():
            return unknown(f"the command contains the character {char!r}")
    return None


def _classify_tree(tree: tree_sitter.Tree, source: bytes, context: _Context) -> Verdict:
    root = tree.root_node
    if root.has_error:
        return unknown("the command does not parse as bash")
    if root.descendant_count > MAX_TREE_NODES:
        raise _Abort("the command has too many parts to check")
    if not _covered(root, source):
        return unknown("part of the command is missing from its parse tree")
    return _statement(root, context)


def _covered(root: tree_sitter.Node, source: bytes) -> bool:
    """Whether the tree's leaves cover every byte that is not a blank.

    tree-sitter can skip text bash reads: in ``\\ #>h`` the escaped blank
    vanishes and ``#>h`` becomes a comment, while bash runs `` #`` with its
    output sent to ``h``. Text between leaves may only be blanks and line
    continuations. Here-document bodies are checked whole by the walker.
    """
    cursor = root.walk()
    position = 0
    while True:
        node = cursor.node
        if node is None:
            return False
        if node.type != "heredoc_body" and cursor.goto_first_child():
            continue
        if node.start_byte > position and not _GAP.fullmatch(source, position, node.start_byte):
            return False
        position = max(position, node.end_byte)
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return _GAP.fullmatch(source, position) is not None


def _shape(root: tree_sitter.Node) -> list[str]:
    shape: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        shape.append(node.type)
        stack.extend(reversed(node.children))
    return shape


# ---------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------


def _statement(node: tree_sitter.Node, context: _Context) -> Verdict:
    context.enter()
    kind = node.type
    if kind in _SEQUENCE_TYPES:
        verdict = _sequence(node, context, _SEPARATORS)
    elif kind == "command":
        verdict = _command(node, context)
    elif kind == "redirected_statement":
        verdict = _redirected(node, context)
    elif kind == "comment":
        verdict = _READ_ONLY
    elif kind == "variable_assignment":
        verdict = _assignment(node, context)
    else:
        verdict = _generic(node, context, f"{kind.replace('_', ' ')} is not checked")
    context.depth -= 1
    return verdict


def _sequence(node: tree_sitter.Node, context: _Context, tokens: frozenset[str]) -> Verdict:
    verdict = _READ_ONLY
    for child in node.children:
        if child.is_named:
            if child.type in _REDIRECT_TYPES:
                verdict = worst(verdict, _redirect(child, context))
            elif child.type != "comment":
                verdict = worst(verdict, _statement(child, context))
        elif not _exact(child):
            verdict = worst(verdict, _MISLEXED)
        elif child.type not in tokens and child.type != "&":
            verdict = worst(verdict, unknown(f"{child.type!r} is not checked"))
    return verdict


def _redirected(node: tree_sitter.Node, context: _Context) -> Verdict:
    # tree-sitter hangs words that follow a redirection (``ls > out -la``) on
    # the redirection as extra destinations; to bash they are arguments of
    # the command, so they are handed back to it.
    verdict = _READ_ONLY
    extras: list[_Word] = []
    body: tree_sitter.Node | None = None
    for child in node.children:
        if child.type in _REDIRECT_TYPES:
            verdict = worst(verdict, _redirect(child, context, extras))
        elif child.is_named and body is None:
            body = child
        else:
            verdict = worst(verdict, unknown(f"{child.type!r} is not checked"))
    if body is not None and body.type == "command":
        context.enter()
        verdict = worst(verdict, _command(body, context, extras))
        context.depth -= 1
        return verdict
    if body is not None:
        verdict = worst(verdict, _statement(body, context))
    if extras:
        stray = unknown("words after a redirection")
        verdict = worst(verdict, stray, *(word.verdict for word in extras))
    return verdict


def _assignment(node: tree_sitter.Node, context: _Context) -> Verdict:
    """``NAME=value``: harmless only for names no command or shell turns into code or paths."""
    name = ""
    values: list[_Word] = []
    others = _READ_ONLY
    for child in node.named_children:
        if child.type == "variable_name" and not name:
            name = _text(child)
        elif child.type in _STATEMENT_TYPES or child.type in _REDIRECT_TYPES:
            others = worst(others, _any(child, context))
        else:
            values.append(_word(child, context))
    tokens = [child.type for child in node.children if not child.is_named]
    if tokens != ["="] or len(values) > 1:
        others = worst(others, unknown(f"the assignment to {name or '?'} is not understood"))
    value = values[0].text if values else ""
    verdict = environment_assignment(name, value)
    return worst(verdict, others, *(word.verdict for word in values))


def _generic(node: tree_sitter.Node, context: _Context, reason: str) -> Verdict:
    """A construct the walker does not understand: doubt, or worse inside it."""
    verdict = unknown(reason)
    for child in node.named_children:
        verdict = worst(verdict, _any(child, context))
    return verdict


def _any(node: tree_sitter.Node, context: _Context) -> Verdict:
    kind = node.type
    if kind in _STATEMENT_TYPES:
        return _statement(node, context)
    if kind in _REDIRECT_TYPES:
        return _redirect(node, context)
    return _word(node, context).verdict


def _command(
    node: tree_sitter.Node, context: _Context, trailing: list[_Word] | None = None
) -> Verdict:
    """A simple command; ``trailing`` are arguments found after its redirections."""
    verdicts: list[Verdict] = []
    name: _Word | None = None
    arguments: list[_Word] = []
    for index, child in enumerate(node.children):
        field = node.field_name_for_child(index)
        if field == "name":
            inner = child.named_children
            if child.type != "command_name" or len(inner) != 1:
                return _generic(node, context, "an unusual command name")
            name = _word(inner[0], context)
        elif child.type == "variable_assignment":
            verdicts.append(_assignment(child, context))
        elif child.type in _REDIRECT_TYPES:
            verdicts.append(_redirect(child, context))
        elif field == "argument":
            arguments.append(_word(child, context))
        else:
            verdicts.append(_generic(child, context, f"{child.type!r} in a command"))
    arguments.extend(trailing or ())
    if name is None:
        return worst(unknown("a command without a name"), *verdicts)
    verdicts.append(name.verdict)
    verdicts.extend(argument.verdict for argument in arguments)
    if name.text is None:
        return worst(unknown("the command name is only known at run time"), *verdicts)

    def nested(source: str) -> Verdict:
        return _classify_source(source, context)

    rule = classify_simple_command(name.text, [argument.text for argument in arguments], nested)
    if rule.severity is not Severity.READ_ONLY:
        return worst(rule, *verdicts)
    command = command_name(name.text)
    if command == "git":
        context.git_reads = True
    return worst(rule, *verdicts, _operands(command, arguments, context))


# ---------------------------------------------------------------------------
# What the command reads: the scope rule
# ---------------------------------------------------------------------------


def _operands(name: str, arguments: list[_Word], context: _Context) -> Verdict:
    """Doubt if command ``name`` may read outside the workspace (see :class:`Scope`)."""
    scope = context.scope
    verdict = _READ_ONLY
    for word in arguments:
        if word.text is None and word.pattern is not None:
            # A glob lists directories whatever the command does with the names.
            if scope is None:
                return unknown("a glob is expanded but no workspace was given to check it in")
            problem = scope.pattern(word.pattern, tilde=word.tilde)
            if problem is not None:
                return problem
    if name in NO_PATHS:
        return verdict
    for word in arguments:
        if word.text is None and word.pattern is None and not word.pipe:
            if word.tilde:
                return unknown(f"{name}: ~ is the home directory, outside the workspace")
            return unknown(
                f"{name} has an argument only known at run time, which may lead outside "
                "the workspace"
            )
    texts = [DYNAMIC if word.text is None else word.text for word in arguments]
    if scope is None:
        found = path_arguments(name, texts)
        if name in DIRECTORY_CHANGES or name == "git" or found.paths or found.doubt:
            return unknown(f"{name} opens paths but no workspace was given to check them against")
        return verdict
    if name in DIRECTORY_CHANGES:
        return scope.change_directory(name, texts) or verdict
    if name == "git":
        paths, doubt = git_paths(texts)
        if doubt is not None:
            return unknown(doubt)
        bases: list[str] | None = None
        for directory in paths.directories:
            bases, moved = _git_directory(scope, directory, bases)
            if moved is not None:
                return moved
        where = scope.git_bases(bases)
        scope.git_directory(where)
        for path in paths.paths:
            problem_verdict = scope.path(path, where)
            if problem_verdict is not None:
                return problem_verdict
        return verdict
    found = path_arguments(name, texts)
    if found.doubt is not None:
        return unknown(found.doubt)
    for path in found.paths:
        problem_verdict = scope.path(path)
        if problem_verdict is not None:
            return problem_verdict
    if found.follows is not None:
        for path in found.paths or ["."]:
            problem_verdict = scope.walk(path, found.follows)
            if problem_verdict is not None:
                return problem_verdict
    return verdict


def _git_directory(
    scope: Scope, directory: str, bases: list[str] | None
) -> tuple[list[str], Verdict | None]:
    """``git -C directory``: where git runs next, from each place it could be."""
    moved: list[str] = []
    for base in scope.git_bases(bases):
        found = scope.directory(directory, base)
        if isinstance(found, Verdict):
            return [], found
        if found is not None:
            moved.append(found)
    return moved, None
