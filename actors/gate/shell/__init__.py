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

The walker is split by what it walks: :mod:`.classify` (the entry points,
parsing, statements and simple commands, and the scope rule for their
operands), :mod:`.redirects` (redirections and here-documents) and
:mod:`.words` (words and the expansions inside them), over the shared
per-call state of :mod:`.context`. The public names are re-exported here.
"""

from fore.actors.gate.shell.classify import classify_shell_command, explain_shell_command
from fore.actors.gate.shell.context import (
    MAX_COMMAND_CHARS,
    MAX_DEPTH,
    MAX_NESTED_SOURCES,
    MAX_TREE_NODES,
    MAX_VISITS,
)

__all__ = [
    "MAX_COMMAND_CHARS",
    "MAX_DEPTH",
    "MAX_NESTED_SOURCES",
    "MAX_TREE_NODES",
    "MAX_VISITS",
    "classify_shell_command",
    "explain_shell_command",
]
