"""The shell read-only classifier: may a speculative shell command run?

A speculation runs tool calls the user has not approved, against the real
working tree. A shell command may run there only if it provably cannot change
anything, so this module fails closed: a command is ``"read-only"`` only when
every part of it is understood and harmless; a parse error, a construct the
walker does not know, a run-time expansion where the argument matters, or any
other doubt makes it ``"unknown"``, which the gate treats like ``"write"``.

The command is parsed with tree-sitter's bash grammar and the tree is walked:
lists, pipelines, subshells and groups take the worst of their parts; simple
commands are judged by :mod:`fore.actors.gate.rules`; redirections, command
and process substitutions, here-documents and parameter expansions are checked
wherever they appear (arguments, assignments, redirect targets, here-doc
bodies, inside double quotes). Because tree-sitter is not bash, the walker also
refuses input on which the two could disagree: control characters, unusual
whitespace, characters inside a word that bash would treat specially, and a
backslash-newline that changes how the command parses. Text tree-sitter leaves
unparsed but bash expands -- the pattern of ``${x#...}``/``${x%...}``/
``${x/...}``/``${x^...}``, and quotes that are literal inside a double-quoted
``${x:-'...'}`` -- is doubt when it could hold a substitution, and is re-read
as bash may read it so that a write in there is still a write.

Every call is bounded: the input length, the tree size, the walk's depth, the
number of nodes visited and the number of command strings parsed (nested
scripts and re-read text) are capped, and hitting a cap is doubt -- so the
cost of a hostile command is bounded by construction, not by a timer.

"Read-only" also means "reads only the workspace": the classifier needs the
workspace (a speculation may read nothing else), and every path a command
opens -- operands, option values, ``<`` targets, glob and brace expansions,
``cd``/``git -C`` directories, the trees ``grep -R`` walks -- is held to the
scope rule the file tools apply (:mod:`fore.actors.gate.scope`,
:func:`actors.tools.paths.resolve_in_workspace`). Another process's data under
``/proc`` and ``ps`` are never read-only. Git runs only where its local config
was probed (every directory it may run in), and without a workspace git and
every path are doubt.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import threading
from dataclasses import dataclass, field
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
    write,
)
from fore.actors.gate.scope import MAX_DIRECTORIES, Scope

if TYPE_CHECKING:
    from fore.messages.gate import ShellClass

MAX_COMMAND_CHARS = 32_768
MAX_TREE_NODES = 20_000
MAX_DEPTH = 150
MAX_VISITS = 20_000
MAX_NESTED_SOURCES = 32
"""Command strings classified per call: the command, ``bash -c``/``eval`` scripts, and
the re-readings of here-document text and ``${...}`` operands (each at most
:data:`MAX_COMMAND_CHARS` long), so the total parsing work is bounded too."""

_SHELL_CLASS: dict[Severity, ShellClass] = {
    Severity.READ_ONLY: "read-only",
    Severity.UNKNOWN: "unknown",
    Severity.WRITE: "write",
}

_SAFE_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_NETWORK_PATHS = ("/dev/tcp/", "/dev/udp/")
_OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})
_CLOSE_REDIRECTS = frozenset({">&-", "<&-"})
_REDIRECT_TYPES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
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
_SUBSTITUTION_TOKENS = frozenset({"$(", "`", "$`", ")", "<(", ">(", ";", "\n"})
_EXPANSION_OPERATORS = frozenset(
    {
        ":-", "-", ":+", "+", ":?", "?", "#", "##", "%", "%%",
        "/", "//", "/#", "/%", "^", "^^", ",", ",,",
    }
)  # fmt: skip
_VARIABLE_TYPES = frozenset({"variable_name", "special_variable_name"})
_SAFE_TRANSFORMS = frozenset("QEAaUuLKk")
"""``${x@op}`` operators that only transform the value (``P`` runs the prompt expansion)."""
_WORD_SPECIALS = frozenset("$`'\"()<>;&|")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./:,+%@^-][A-Za-z0-9_./:,+%@^=-]*")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BACKQUOTE_SPLIT = re.compile(r"(?<!\\)(?:\\\\)*`")
_BACKQUOTE_ESCAPE = re.compile(r"\\([\\`$])")
_GAP = re.compile(rb"(?:[ \t\n]|\\\n)*")
_CONTINUATION = re.compile(r"(?<!\\)((?:\\\\)*)\\\r?\n")
_HIDDEN_EXPANSION = re.compile(r"(?<!\\)(?:\\\\)*(?:`|\$[({\[A-Za-z0-9_@*#?$!-])")
_SUBSTITUTION_TEXT = re.compile(r"\$[(\[]|`|[<>]\(")
"""Text that may hold a command or process substitution (or ``$[...]`` arithmetic)."""
_EXPANDABLE_TEXT = re.compile(r"[$`]|[<>]\(")
_SIMPLE_OPERAND = re.compile(
    r"(?:[^$`\\'\"<>]|[<>](?!\()"
    r"|\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\}|[0-9@*#?$!-]))*"
)
"""A ``${...}`` operand with nothing but literal text and plain ``$name`` expansions."""
_OPAQUE_TYPES = frozenset({"raw_string", "ansi_c_string", "word", "number", "brace_expression"})
"""Nodes inside ``${...}`` whose text tree-sitter does not parse further (``regex``, the
other one, is re-read wherever it appears)."""
_OWN_CHECK_TYPES = frozenset(
    {"command_substitution", "process_substitution", "expansion", "arithmetic_expansion", "regex"}
)


class _Abort(Exception):
    """A walk limit was hit: the command is too large or too deep to be sure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class _Word:
    """A word's verdict and, when it is fixed before run time, its literal value.

    ``pattern`` is the word in glob syntax (quoted specials escaped) when its
    only run-time parts are unquoted globs and braces, which the scope check
    expands against the real directories; ``tilde`` says it starts with an
    unquoted ``~``; ``pipe`` that it is a process substitution (a ``/dev/fd``
    pipe, not a file).
    """

    verdict: Verdict
    text: str | None
    pattern: str | None = None
    tilde: bool = False
    pipe: bool = False


@dataclass(slots=True)
class _Context:
    depth: int = 0
    visits: int = 0
    sources: int = 0
    git_reads: bool = False
    reparsed: set[str] = field(default_factory=set)
    """Synthetic here-document sources being classified (each is parsed at most once)."""
    scope: Scope | None = None
    """Where the command may read (None: the workspace is not known, nothing may be read)."""

    def enter(self) -> None:
        self.depth += 1
        self.visits += 1
        if self.depth > MAX_DEPTH:
            raise _Abort("the command is nested too deeply to check")
        if self.visits > MAX_VISITS:
            raise _Abort("the command has too many parts to check")


_READ_ONLY = read_only("the command only reads")
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


def _exact(token: tree_sitter.Node) -> bool:
    """Whether an anonymous token spans exactly its own spelling.

    tree-sitter-bash's external scanner can fold neighbouring text into a
    token: in ``find . -delete<<EOF`` the ``<<`` token spans ``-delete<<`` and
    the ``-delete`` argument vanishes from the tree. Every token the walker
    passes over is checked, and one that spans more than itself is doubt.
    """
    return token.end_byte - token.start_byte == len(token.type)


_MISLEXED = unknown("the parser folded text into an operator token")


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


def _scope_path(word: _Word, context: _Context, what: str) -> Verdict:
    """A path the shell itself opens (a ``<`` target): in the workspace, or doubt."""
    scope = context.scope
    if word.pipe:
        return _READ_ONLY
    if word.text is None and word.pattern is None:
        if word.tilde:
            return unknown(f"{what} ~ is the home directory, outside the workspace")
        return unknown(f"{what} is only known at run time and may lead outside the workspace")
    if scope is None:
        return unknown(f"{what} opens a path but no workspace was given to check it against")
    if word.text is None and word.pattern is not None:
        return scope.pattern(word.pattern, tilde=word.tilde) or _READ_ONLY
    return scope.path(word.text or "") or _READ_ONLY


# ---------------------------------------------------------------------------
# Redirections
# ---------------------------------------------------------------------------


def _redirect(
    node: tree_sitter.Node, context: _Context, extras: list[_Word] | None = None
) -> Verdict:
    """A redirection; words after its target go to ``extras`` (doubt without one)."""
    context.enter()
    if node.type == "file_redirect":
        verdict, more = _file_redirect(node, context)
        if extras is not None:
            extras.extend(more)
        elif more:
            stray = unknown("words after a redirection")
            verdict = worst(verdict, stray, *(word.verdict for word in more))
    elif node.type == "heredoc_redirect":
        verdict = _heredoc(node, context, extras)
    else:
        verdict = _READ_ONLY
        for child in node.children:
            if child.is_named:
                verdict = worst(verdict, _word(child, context).verdict)
            elif child.type != "<<<" or not _exact(child):
                verdict = worst(verdict, unknown(f"{child.type!r} in a here-string"))
    context.depth -= 1
    return verdict


def _file_redirect(node: tree_sitter.Node, context: _Context) -> tuple[Verdict, list[_Word]]:
    """The verdict of one ``<``/``>``-style redirection and the words after its target."""
    operator = ""
    targets: list[_Word] = []
    verdict = _READ_ONLY
    for index, child in enumerate(node.children):
        field = node.field_name_for_child(index)
        if field == "descriptor":
            if not child.text or not child.text.isdigit():
                verdict = worst(verdict, unknown("a named file descriptor"))
        elif field == "destination":
            targets.append(_word(child, context))
        elif not child.is_named and not operator:
            operator = child.type
            if not _exact(child):
                verdict = worst(verdict, _MISLEXED)
        else:
            verdict = worst(verdict, unknown(f"{child.type!r} in a redirection"))
    if operator in _CLOSE_REDIRECTS:
        return verdict, targets
    if not targets:
        return worst(verdict, unknown("a redirection without a target")), []
    first, extras = targets[0], targets[1:]
    verdict = worst(verdict, first.verdict, _redirect_target(operator, first.text))
    if operator == "<" and verdict.severity is Severity.READ_ONLY:
        verdict = _scope_path(first, context, "the input redirection")
    return verdict, extras


def _redirect_target(operator: str, target: str | None) -> Verdict:
    if target is not None and os.path.normpath(target).startswith(_NETWORK_PATHS):
        return unknown(f"the redirection to {target} opens a network connection")
    if operator in _OUTPUT_REDIRECTS:
        if target in _SAFE_SINKS:
            return _READ_ONLY
        return write(f"output redirection {operator} {target or '…'} writes a file")
    if operator == "<":
        return _READ_ONLY
    if operator in (">&", "<&"):
        # ``2>&1`` duplicates, ``>&-`` closes, ``>&2-`` moves a descriptor: no file.
        if target is not None and (target.removesuffix("-").isdigit() or target == "-"):
            return _READ_ONLY
        if operator == ">&" and target in _SAFE_SINKS:
            return _READ_ONLY
        if operator == ">&" and target is not None:
            return write(f"output redirection >& {target} writes a file")
    return unknown(f"the redirection {operator!r} is not understood")


def _heredoc(node: tree_sitter.Node, context: _Context, extras: list[_Word] | None) -> Verdict:
    verdict = _READ_ONLY
    quoted = False
    delimiter = b""
    for index, child in enumerate(node.children):
        kind = child.type
        if kind in ("<<", "<<-"):
            if not _exact(child):
                verdict = worst(verdict, _MISLEXED)
            continue
        if kind == "heredoc_end":
            # An unterminated here-document runs to the end of the input in
            # bash; tree-sitter then takes some other line for its end.
            if child.text != delimiter:
                verdict = worst(verdict, unknown("the here-document does not end at its delimiter"))
            continue
        if kind == "heredoc_start":
            start = child.text or b""
            quoted = any(char in start for char in b"'\"\\")
            delimiter = start.translate(None, b"'\"\\")
        elif kind == "heredoc_body":
            verdict = worst(verdict, _heredoc_body(child, context, quoted=quoted))
        elif kind in _REDIRECT_TYPES:
            verdict = worst(verdict, _redirect(child, context, extras))
        elif node.field_name_for_child(index) == "argument":
            word = _word(child, context)
            if extras is not None:
                extras.append(word)
            else:
                verdict = worst(verdict, unknown("words after a here-document"), word.verdict)
        elif child.is_named:
            verdict = worst(verdict, _statement(child, context))
        else:
            verdict = worst(verdict, unknown(f"{kind!r} in a here-document"))
    return verdict


def _heredoc_body(node: tree_sitter.Node, context: _Context, *, quoted: bool) -> Verdict:
    if quoted:
        if node.named_child_count:
            return unknown("a quoted here-document with expansions")
        return _READ_ONLY
    # The grammar leaves some body text outside any child node (before the
    # first expansion, say), so the body is read as text between expansions.
    verdict = _READ_ONLY
    for piece in _pieces(node):
        if isinstance(piece, str):
            verdict = worst(verdict, _hidden_expansions(piece, context))
        elif piece.type != "heredoc_content":
            verdict = worst(verdict, _word(piece, context).verdict)
    return verdict


def _pieces(node: tree_sitter.Node) -> list[str | tree_sitter.Node]:
    """A node's named children with the raw text between them as strings.

    Text covered by a ``heredoc_content`` or ``string_content`` child is
    returned as text too, so nothing in the node escapes a check.
    """
    raw = node.text or b""
    base = node.start_byte
    pieces: list[str | tree_sitter.Node] = []
    position = 0
    for child in node.named_children:
        if child.type in ("heredoc_content", "string_content"):
            continue
        start = child.start_byte - base
        if start > position:
            pieces.append(raw[position:start].decode("utf-8", errors="replace"))
        pieces.append(child)
        position = max(position, child.end_byte - base)
    if position < len(raw):
        pieces.append(raw[position:].decode("utf-8", errors="replace"))
    return pieces


def _hidden_expansions(text: str, context: _Context) -> Verdict:
    """Here-document text tree-sitter left as plain content.

    Bash expands ``$(...)``, ``${...}``, ``$var`` and backquotes in an unquoted
    here-document, but the grammar misses them in two cases: backquotes
    (never parsed in a body), and lines that start with a blank (``<<-``
    bodies indented with tabs, say), after which it may parse nothing in the
    body at all. The text is therefore parsed once more as the body of a
    synthetic here-document with those blanks removed (:func:`_unindented`);
    what is still hidden after that is doubt, and a backquoted command is
    checked on its own, so a write in there is a write.
    """
    if _HIDDEN_EXPANSION.search(text) is None:
        return _READ_ONLY
    synthetic = _synthetic_heredoc(text)
    if synthetic not in context.reparsed:
        context.reparsed.add(synthetic)
        try:
            return _classify_source(synthetic, context)
        finally:
            context.reparsed.discard(synthetic)
    verdict = unknown("a command or expansion in a here-document is not checked")
    parts = _BACKQUOTE_SPLIT.split(text)
    if len(parts) % 2 == 0:
        return verdict
    for inner in parts[1::2]:
        verdict = worst(verdict, _classify_source(_BACKQUOTE_ESCAPE.sub(r"\1", inner), context))
    return verdict


def _synthetic_heredoc(text: str) -> str:
    """``cat`` reading ``text`` unindented as an unquoted here-document.

    The delimiter is one no line of ``text`` can match, so the body is the
    whole text.
    """
    delimiter = "FORE_HEREDOC_END"
    while delimiter in text:
        delimiter += "_"
    body = _unindented(text)
    if not body.endswith("\n"):
        body += "\n"
    return f"cat <<{delimiter}\n{body}{delimiter}"


def _unindented(text: str) -> str:
    """``text`` with the blanks that start its lines removed.

    Bash finds the same expansions in the result: a blank at the start of a
    line is content in a here-document and a word separator inside a
    substitution. A line after a backslash-newline keeps its blanks (bash
    joins the two lines, and the blanks may separate words there). Removing
    blanks can only make a nested here-document end earlier (`` X`` becomes
    its delimiter ``X``), so more of the text is read as commands -- never
    less.
    """
    lines = text.split("\n")
    out = [lines[0]]
    for previous, line in itertools.pairwise(lines):
        continued = (len(previous) - len(previous.rstrip("\\"))) % 2 == 1
        out.append(line if continued else line.lstrip(" \t"))
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Words
# ---------------------------------------------------------------------------


def _text(node: tree_sitter.Node) -> str:
    return (node.text or b"").decode("utf-8", errors="replace")


def _word(node: tree_sitter.Node, context: _Context) -> _Word:
    context.enter()
    kind = node.type
    if not node.is_named:
        word = _Word(unknown(f"a stray {kind!r}"), None)
    elif kind in ("word", "number"):
        word = _unquoted(_text(node))
    elif kind == "raw_string":
        word = _raw_string(_text(node))
    elif kind == "ansi_c_string":
        text = _text(node)
        literal = text[2:-1] if text.startswith("$'") and text.endswith("'") else None
        word = _literal(_READ_ONLY, None if literal is None or "\\" in literal else literal)
    elif kind == "string":
        word = _double_quoted(node, context)
    elif kind == "concatenation":
        word = _concatenation(node, context)
    elif kind == "simple_expansion":
        parts = node.children
        ok = (
            len(parts) == 2
            and parts[0].type == "$"
            and _exact(parts[0])
            and parts[1].type in _VARIABLE_TYPES
        )
        word = _Word(_READ_ONLY if ok else unknown("an unusual $ expansion"), None)
    elif kind == "expansion":
        word = _Word(_expansion(node, context), None)
    elif kind in ("command_substitution", "process_substitution"):
        # The inner command runs like any other: read-only if it is. Its
        # output is only known at run time (a process substitution is a pipe).
        inner = _sequence(node, context, _SUBSTITUTION_TOKENS)
        word = _Word(inner, None, pipe=kind == "process_substitution")
    elif kind == "brace_expression":
        word = _Word(_READ_ONLY, None, pattern=_text(node))
    elif kind == "regex":
        # A ${x#pattern} operand (or a [[ =~ ]] regex): tree-sitter leaves it
        # unparsed, but bash expands it -- command substitutions included.
        text = _text(node)
        verdict = _opaque(text, context)
        word = _Word(verdict, text if verdict.severity is Severity.READ_ONLY else None)
    else:
        word = _Word(_generic(node, context, f"{kind.replace('_', ' ')} is not checked"), None)
    context.depth -= 1
    return word


def _literal(verdict: Verdict, text: str | None) -> _Word:
    """A word whose value is ``text`` (None: only known at run time)."""
    return _Word(verdict, text)


def _glob_form(word: _Word) -> str | None:
    """``word`` in glob syntax: a literal with its specials escaped, or its pattern."""
    if word.text is not None:
        return _GLOB_SPECIAL.sub(r"\\\g<0>", word.text)
    return word.pattern


_GLOB_SPECIAL = re.compile(r"[\\*?\[\]{},~]")


def _unquoted(raw: str) -> _Word:
    """An unquoted word: undo backslash escapes, note globs, braces and tildes."""
    if _PLAIN_WORD.fullmatch(raw):
        return _literal(_READ_ONLY, raw)
    out: list[str] = []
    tilde = raw.startswith("~")
    if "=~" in raw or ":~" in raw:
        return _Word(_READ_ONLY, None)
    dynamic = tilde
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == "\\":
            if i + 1 >= len(raw):
                return _Word(unknown("a word ends in a lone backslash"), None)
            if raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
            continue
        if char in _WORD_SPECIALS or char.isspace():
            return _Word(unknown(f"an unexpected {char!r} inside a word"), None)
        if char in "*?[" or (char in "{}" and raw != "{}"):
            dynamic = True
        out.append(char)
        i += 1
    if not dynamic:
        return _literal(_READ_ONLY, "".join(out))
    if tilde:
        globbed = any(char in raw for char in "*?[{")
        return _Word(_READ_ONLY, None, pattern=raw if globbed else None, tilde=True)
    return _Word(_READ_ONLY, None, pattern=raw)


def _raw_string(raw: str) -> _Word:
    if len(raw) < 2 or raw[0] != "'" or raw[-1] != "'" or "'" in raw[1:-1]:
        return _Word(unknown("an unusual single-quoted string"), None)
    return _literal(_READ_ONLY, raw[1:-1])


def _double_quoted(node: tree_sitter.Node, context: _Context) -> _Word:
    children = node.children
    if (
        len(children) < 2
        or children[0].type != '"'
        or children[-1].type != '"'
        or not _exact(children[0])
        or not _exact(children[-1])
    ):
        return _Word(_MISLEXED, None)
    verdict = _READ_ONLY
    parts: list[str] = []
    dynamic = False
    for piece in _pieces(node):
        if isinstance(piece, str):
            if _HIDDEN_EXPANSION.search(piece):
                return _Word(unknown("an expansion inside double quotes is not checked"), None)
            parts.append(_unescape_double_quoted(piece))
            continue
        word = _word(piece, context)
        verdict = worst(verdict, word.verdict)
        if word.text is None:
            dynamic = True
        else:
            parts.append(word.text)
    # The text pieces include the quotes themselves.
    return _literal(verdict, None if dynamic else "".join(parts)[1:-1])


def _unescape_double_quoted(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _concatenation(node: tree_sitter.Node, context: _Context) -> _Word:
    children = node.children
    if all(child.type in ("word", "number") for child in children):
        # Adjacent bare words are one word to bash: ``{}``, ``a{b,c}``, ``[ab]``.
        return _unquoted(_text(node))
    verdict = _READ_ONLY
    parts: list[str] = []
    patterns: list[str] | None = []
    dynamic = False
    tilde = False
    globbed = False
    for index, child in enumerate(children):
        word = _word(child, context)
        verdict = worst(verdict, word.verdict)
        tilde = tilde or (index == 0 and word.tilde)
        globbed = globbed or (word.text is None and word.pattern is not None)
        if word.text is None:
            dynamic = True
        else:
            parts.append(word.text)
        form = None if patterns is None else _glob_form(word)
        if patterns is not None and form is not None:
            patterns.append(form)
        else:
            patterns = None
    if not dynamic:
        return _literal(verdict, "".join(parts))
    if tilde:
        # ``~/"x"*`` lists the home directory; ``~/"x"`` names a path in it.
        return _Word(verdict, None, pattern="~" if globbed else None, tilde=True)
    pattern = None if patterns is None else "".join(patterns)
    return _Word(verdict, None, pattern=pattern)


def _expansion(node: tree_sitter.Node, context: _Context) -> Verdict:
    """``${...}``: plain, length and the pattern/default operators only.

    ``${var@P}`` expands a prompt string (which can run commands), indirect
    ``${!x}``, subscripts and substrings evaluate arithmetic (which can too),
    ``${x:=v}`` assigns: they and everything else unrecognised are doubt.
    """
    children = node.children
    tokens_ok = all(_exact(child) for child in children if not child.is_named)
    if len(children) < 3 or children[0].type != "${" or children[-1].type != "}" or not tokens_ok:
        return _generic(node, context, "an unusual ${...} expansion")
    inner = children[1:-1]
    if inner[0].type == "#" and len(inner) == 2 and inner[1].type in _VARIABLE_TYPES:
        return _READ_ONLY
    if len(inner) == 3 and inner[0].type in _VARIABLE_TYPES and inner[1].type == "@":
        # ${x@Q}, ${x@U} ... only transform the value; ${x@P} expands it as a
        # prompt string, which runs the command substitutions inside it.
        if inner[2].type in _SAFE_TRANSFORMS and _exact(inner[1]) and _exact(inner[2]):
            return _READ_ONLY
        return unknown(f"the ${{...@{inner[2].type}}} transformation is not checked")
    if inner[0].type not in _VARIABLE_TYPES:
        return _generic(node, context, f"the ${{...}} form with {inner[0].type!r} is not checked")
    verdict = _substitution_floor(node)
    for child in inner[1:]:
        if child.is_named:
            verdict = worst(verdict, _word(child, context).verdict, _operand(child, context))
        elif child.type not in _EXPANSION_OPERATORS:
            return _generic(node, context, f"the ${{...}} operator {child.type!r} is not checked")
    return verdict


def _substitution_floor(node: tree_sitter.Node) -> Verdict:
    """Doubt for any ``${...}`` whose text could hold a command or process substitution.

    The walk below may miss one: tree-sitter leaves the ``#``/``%``/``/``/``^``/``,``
    operands unparsed, and reads quotes that are literal in a double-quoted
    ``${x:-'...'}`` or a here-document as quoting. Whatever the tree says, a
    ``$(``, ``$[``, backquote, ``<(`` or ``>(`` anywhere in the text is doubt.
    """
    if _SUBSTITUTION_TEXT.search(_text(node)) is None:
        return _READ_ONLY
    return unknown("a command or process substitution inside ${...} is not checked")


def _operand(node: tree_sitter.Node, context: _Context) -> Verdict:
    """The unparsed text of a ``${...}`` operand, read as bash may read it.

    Nested substitutions and expansions are checked where they are walked;
    everything else under ``node`` that tree-sitter left as text is re-read.
    """
    verdict = _READ_ONLY
    stack = [node]
    while stack:
        current = stack.pop()
        context.enter()
        context.depth -= 1
        if current.type in _OPAQUE_TYPES:
            verdict = worst(verdict, _opaque(_text(current), context))
        elif current.type not in _OWN_CHECK_TYPES:
            stack.extend(current.named_children)
    return verdict


def _opaque(text: str, context: _Context) -> Verdict:
    """Text bash expands but tree-sitter left unparsed: a ``${...}`` operand.

    Literal text and plain ``$name`` expansions are harmless. Anything else is
    re-read both ways bash may read it -- quoted, with single quotes literal
    (as in a double-quoted ``${x:-'...'}`` or an unquoted here-document), and
    as an unquoted word -- and both readings must be read-only; a substitution
    is doubt whatever the readings say, and a reading that writes makes the
    operand a write. The quoted reading is a double-quoted string when the
    text holds no ``"`` (the two expand alike then, and tree-sitter parses
    strings more fully than here-document bodies), else a here-document.
    """
    if _EXPANDABLE_TEXT.search(text) is None or _SIMPLE_OPERAND.fullmatch(text):
        return _READ_ONLY
    verdict = _READ_ONLY
    if _SUBSTITUTION_TEXT.search(text) is not None:
        verdict = unknown("a command or process substitution inside ${...} is not checked")
    quoted = f'echo "{text}"' if '"' not in text else _synthetic_heredoc(text)
    for source in (quoted, f"echo {text}"):
        if verdict.severity is Severity.WRITE:
            break
        if source in context.reparsed:
            verdict = worst(verdict, unknown("an expansion inside ${...} is not checked"))
            continue
        context.reparsed.add(source)
        try:
            reading = _classify_source(source, context)
        finally:
            context.reparsed.discard(source)
        if reading.severity is not Severity.READ_ONLY:
            verdict = worst(
                verdict, Verdict(reading.severity, f"inside ${{...}}: {reading.reason}")
            )
    return verdict
