"""Words in the shell walk: their values, and the expansions inside them.

A word's value is known when it is fixed before run time (quotes and
escapes undone); globs, braces and tildes are kept as a pattern for the
scope check; ``$name``, ``${...}`` and substitutions are checked where they
appear, and the text tree-sitter leaves unparsed inside ``${...}`` is re-read
as bash may read it (:func:`_opaque`). Also the helpers that split a string
or here-document into text and nodes and build a synthetic here-document,
which :mod:`.redirects` shares.
"""

from __future__ import annotations

import itertools
import re

import tree_sitter

from fore.actors.gate.rules import Severity, Verdict, unknown, worst
from fore.actors.gate.shell.context import _MISLEXED, _READ_ONLY, _Context, _exact, _Word

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
        inner = classify._sequence(node, context, _SUBSTITUTION_TOKENS)
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
        word = _Word(
            classify._generic(node, context, f"{kind.replace('_', ' ')} is not checked"), None
        )
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
        return classify._generic(node, context, "an unusual ${...} expansion")
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
        return classify._generic(
            node, context, f"the ${{...}} form with {inner[0].type!r} is not checked"
        )
    verdict = _substitution_floor(node)
    for child in inner[1:]:
        if child.is_named:
            verdict = worst(verdict, _word(child, context).verdict, _operand(child, context))
        elif child.type not in _EXPANSION_OPERATORS:
            return classify._generic(
                node, context, f"the ${{...}} operator {child.type!r} is not checked"
            )
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
            reading = classify._classify_source(source, context)
        finally:
            context.reparsed.discard(source)
        if reading.severity is not Severity.READ_ONLY:
            verdict = worst(
                verdict, Verdict(reading.severity, f"inside ${{...}}: {reading.reason}")
            )
    return verdict


# Back to the statements: a command substitution or a here-document holds
# statements of its own, so the walk is recursive across these modules. The
# calls go through the module object, looked up at call time; imported last,
# after every name here is defined, so any import order resolves the cycle.
from fore.actors.gate.shell import classify  # noqa: E402
