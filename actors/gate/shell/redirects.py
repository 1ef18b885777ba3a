"""Redirections and here-documents in the shell walk.

Which files the shell itself opens for a command -- an output redirection
writes (``/dev/null`` and the standard streams excepted), a ``<`` target is
held to the scope rule, ``/dev/tcp`` is the network -- and the bodies of
here-documents, whose text bash expands and which is therefore re-read as
bash may read it (:func:`_hidden_expansions`).
"""

from __future__ import annotations

import os
import re

import tree_sitter

from fore.actors.gate.rules import Severity, Verdict, unknown, worst, write
from fore.actors.gate.shell.context import _MISLEXED, _READ_ONLY, _Context, _exact, _Word
from fore.actors.gate.shell.words import _HIDDEN_EXPANSION, _pieces, _synthetic_heredoc, _word

_SAFE_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_NETWORK_PATHS = ("/dev/tcp/", "/dev/udp/")
_OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})
_CLOSE_REDIRECTS = frozenset({">&-", "<&-"})
_REDIRECT_TYPES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_BACKQUOTE_SPLIT = re.compile(r"(?<!\\)(?:\\\\)*`")
_BACKQUOTE_ESCAPE = re.compile(r"\\([\\`$])")


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
            verdict = worst(verdict, classify._statement(child, context))
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
            return classify._classify_source(synthetic, context)
        finally:
            context.reparsed.discard(synthetic)
    verdict = unknown("a command or expansion in a here-document is not checked")
    parts = _BACKQUOTE_SPLIT.split(text)
    if len(parts) % 2 == 0:
        return verdict
    for inner in parts[1::2]:
        verdict = worst(
            verdict, classify._classify_source(_BACKQUOTE_ESCAPE.sub(r"\1", inner), context)
        )
    return verdict


# Back to the statements: a command substitution or a here-document holds
# statements of its own, so the walk is recursive across these modules. The
# calls go through the module object, looked up at call time; imported last,
# after every name here is defined, so any import order resolves the cycle.
from fore.actors.gate.shell import classify  # noqa: E402
