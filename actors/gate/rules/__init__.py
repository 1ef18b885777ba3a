"""Per-command rules of the shell read-only classifier.

The tree walker in :mod:`fore.actors.gate.shell` reduces every simple command
to a literal command name and a list of arguments (``None`` for an argument
whose value is only known at run time: ``$VAR``, a glob, a brace expansion, a
tilde). This package decides what such a command does. It is deliberately a
table of small, explicit rules: a command is read-only only when it is on the
allowlist *and* its arguments pass that command's rule; everything else is
``unknown`` (or ``write`` when we know it writes). The rules encode the holes
the reference implementation had to patch one by one -- ``sort -o``, ``sed -i``
and its ``w`` command, ``find -delete``, ``rg --pre``, ``git branch NAME``,
``git --ext-diff``.

One module per concept: :mod:`.verdict` (what a rule returns), :mod:`.options`
(the GNU getopt model), the command families :mod:`.coreutils`, :mod:`.sed`,
:mod:`.awk` and :mod:`.git`, and :mod:`.dispatch` (the allowlists and the
entry points the walker calls). The public names are re-exported here.
"""

from fore.actors.gate.rules.awk import AWKS, awk_program_problem
from fore.actors.gate.rules.coreutils import WRITE_ROOTS
from fore.actors.gate.rules.dispatch import (
    ARGUMENT_RULES,
    DIRECTORY_CHANGES,
    HARMLESS_ENVIRONMENT,
    PLAIN_READ_ONLY,
    SCRIPT_SHELLS,
    SHELLS,
    SYSTEM_DIRECTORIES,
    WRAPPERS,
    classify_simple_command,
    command_name,
    environment_assignment,
)
from fore.actors.gate.rules.git import (
    GIT_READ_ONLY,
    GIT_SAFE_GLOBAL_OPTIONS,
    GIT_WRITES,
    GitPaths,
    git_paths,
)
from fore.actors.gate.rules.options import OptionSpec, ParsedOptions, parse_gnu
from fore.actors.gate.rules.sed import sed_script_problem
from fore.actors.gate.rules.verdict import (
    DYNAMIC,
    Nested,
    Severity,
    Verdict,
    read_only,
    unknown,
    worst,
    write,
)

__all__ = [
    "ARGUMENT_RULES",
    "AWKS",
    "DIRECTORY_CHANGES",
    "DYNAMIC",
    "GIT_READ_ONLY",
    "GIT_SAFE_GLOBAL_OPTIONS",
    "GIT_WRITES",
    "HARMLESS_ENVIRONMENT",
    "PLAIN_READ_ONLY",
    "SCRIPT_SHELLS",
    "SHELLS",
    "SYSTEM_DIRECTORIES",
    "WRAPPERS",
    "WRITE_ROOTS",
    "GitPaths",
    "Nested",
    "OptionSpec",
    "ParsedOptions",
    "Severity",
    "Verdict",
    "awk_program_problem",
    "classify_simple_command",
    "command_name",
    "environment_assignment",
    "git_paths",
    "parse_gnu",
    "read_only",
    "sed_script_problem",
    "unknown",
    "worst",
    "write",
]
