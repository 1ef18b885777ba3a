"""``fore chat --demo``: a generated workspace and a scripted model that really speculates.

A newcomer should see Tab work within a minute, with no key and no network.
So the demo is a real session -- real tools, real overlay, real accept -- whose
model is a :class:`~actors.llm.FunctionModel` playing a short tour:

1. *what does slug.py do?* (sent for you when the demo opens): reads
   ``textkit/slug.py`` and explains it. Suggestions start from the second
   answer, so the demo spends the first one.
2. Whatever you type next is answered, and then the tour's next step is
   suggested: *add a test for an empty title* (the speculation edits
   ``tests/test_slug.py`` in its overlay; Tab applies it), then *make slugify
   return untitled for an empty title* (edits ``textkit/slug.py``), then *run
   the tests* (a shell command: the speculation stops at that boundary, and
   after Tab the command asks for approval), then *add a note to NOTES.md*,
   again and again -- so Tab-Tab-Tab chains for as long as you like.
3. *count slowly* streams a long answer slowly (try Ctrl-C).

How the model answers (this is the whole "script"): every request carries a
``purpose``. ``main`` and ``speculation`` requests run the agent loop -- the
step is recognised from the prompt, answered with tool calls first and with
text once the tool results are in. ``suggestion`` and ``pipelined`` requests
predict the next input and are answered with the JSON text
``{"suggestion": "..."}``: the tour's first step not yet in the history.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fore.actors.llm import FunctionModel, ScriptReply
from fore.messages.conversation import Item, ToolResult, UserMessage
from fore.messages.llm import LlmRequest

OPENING = "what does slug.py do?"
"""The demo's first prompt, sent when it opens (suggestions start from the second answer)."""

ADD_TEST = "add a test for an empty title"
FIX = "make slugify return untitled for an empty title"
RUN_TESTS = "run the tests"
ADD_NOTE = "add a note to NOTES.md"

TOUR: tuple[str, ...] = (OPENING, ADD_TEST, FIX, RUN_TESTS)
"""The steps suggested in order; after them, ADD_NOTE forever."""

NOTES_MARKER = "<!-- new notes go above this line -->"

SLUG_PY = '''"""Turn titles into URL slugs."""

import re


def slugify(title: str) -> str:
    words = re.findall(r"[a-z0-9]+", title.lower())
    return "-".join(words)
'''

SLUG_FIX_OLD = '    return "-".join(words)\n'
SLUG_FIX_NEW = '    return "-".join(words) or "untitled"\n'

TEST_PY = """import unittest

from textkit.slug import slugify


class SlugifyTest(unittest.TestCase):
    def test_words(self) -> None:
        self.assertEqual(slugify("Hello, World!"), "hello-world")
"""

TEST_ADD_OLD = '        self.assertEqual(slugify("Hello, World!"), "hello-world")\n'
TEST_ADD_NEW = (
    TEST_ADD_OLD
    + "\n    def test_empty_title(self) -> None:\n"
    + '        self.assertEqual(slugify(""), "untitled")\n'
)

FILES: dict[str, str] = {
    "README.md": "# textkit\n\nSmall text helpers. `slugify` turns a title into a URL slug.\n",
    "NOTES.md": f"# Notes\n\n{NOTES_MARKER}\n",
    "textkit/__init__.py": 'from textkit.slug import slugify\n\n__all__ = ["slugify"]\n',
    "textkit/slug.py": SLUG_PY,
    "tests/__init__.py": "",
    "tests/test_slug.py": TEST_PY,
}

TEST_COMMAND = "python3 -m unittest -q"


def make_workspace(root: Path) -> Path:
    """Write the demo project into ``root`` (created; must be empty if it exists)."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty: the demo needs an empty directory")
    for relative, content in FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return root


# -- the model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pace:
    """How fast the demo model answers (tests make it faster; ``None``: no pacing)."""

    main_ttft_ms: int | None = 250
    main_tokens_per_s: float | None = 60.0
    fork_ttft_ms: int | None = 150
    slow_tokens_per_s: float = 4.0


def _prompts(messages: Sequence[Item]) -> list[str]:
    """The user's prompts in a history (the suggestion prompt itself excluded)."""
    return [
        m.text.strip()
        for m in messages
        if isinstance(m, UserMessage) and not m.text.startswith("[Next-input prediction]")
    ]


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9@./ ]+", " ", text.lower()).split())


def next_suggestion(messages: Sequence[Item]) -> str:
    """The tour's first step not yet asked in ``messages`` (then ADD_NOTE, forever)."""
    asked = {_norm(p) for p in _prompts(messages)}
    for step in TOUR:
        if _norm(step) not in asked:
            return step
    return ADD_NOTE


def _current_prompt(messages: Sequence[Item]) -> str:
    prompts = _prompts(messages)
    return prompts[-1] if prompts else ""


def _tool_results_since_prompt(messages: Sequence[Item]) -> list[ToolResult]:
    results: list[ToolResult] = []
    for item in reversed(messages):
        if isinstance(item, UserMessage):
            break
        if isinstance(item, ToolResult):
            results.append(item)
    return list(reversed(results))


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _note_number(messages: Sequence[Item]) -> int:
    return sum(1 for p in _prompts(messages) if _norm(p) == _norm(ADD_NOTE))


class DemoModel:
    """The demo's model: ``fn(request)`` of a :class:`FunctionModel` (see the module docs)."""

    def __init__(self, pace: Pace | None = None) -> None:
        self.pace = pace or Pace()

    def model(self) -> FunctionModel:
        return FunctionModel(self, name="fore-demo", max_workers=4)

    def __call__(self, request: LlmRequest) -> ScriptReply:
        if request.purpose in ("suggestion", "pipelined"):
            text = json.dumps({"suggestion": next_suggestion(request.messages)})
            return ScriptReply(text=text, ttft_ms=self.pace.fork_ttft_ms or 0)
        reply = self._agent(request.messages)
        if request.purpose == "main":
            pacing = {
                "ttft_ms": self.pace.main_ttft_ms,
                "tokens_per_s": self.pace.main_tokens_per_s,
            }
        else:
            pacing = {"ttft_ms": self.pace.fork_ttft_ms}
        given = {key: value for key, value in pacing.items() if value is not None}
        return ScriptReply.model_validate({**given, **reply})

    # -- the agent loop's answers -----------------------------------------------------------

    def _agent(self, messages: Sequence[Item]) -> dict[str, Any]:
        prompt = _norm(_current_prompt(messages))
        results = _tool_results_since_prompt(messages)
        last = messages[-1] if messages else None
        answered_tools = isinstance(last, ToolResult)
        if "slow" in prompt:
            words = " ".join(str(n) for n in range(1, 301))
            return {
                "text": f"Counting slowly: {words}.",
                "tokens_per_s": self.pace.slow_tokens_per_s,
            }
        if prompt == _norm(OPENING) or ("slug" in prompt and "what" in prompt):
            if not answered_tools:
                return {
                    "text": "Let me read it.",
                    "tool_calls": [_call("read_file", path="textkit/slug.py")],
                }
            return {
                "text": "`slugify(title)` lowercases a title and joins its words with `-`: "
                '"Hello, World!" becomes "hello-world". An empty title gives an empty slug, '
                "and no test covers that yet."
            }
        if prompt == _norm(ADD_TEST):
            return self._edit(
                answered_tools,
                results,
                _call(
                    "edit",
                    path="tests/test_slug.py",
                    old_string=TEST_ADD_OLD,
                    new_string=TEST_ADD_NEW,
                ),
                done="Added `test_empty_title` to tests/test_slug.py: an empty title should "
                'give "untitled". It fails until slugify handles that.',
            )
        if prompt == _norm(FIX):
            return self._edit(
                answered_tools,
                results,
                _call(
                    "edit", path="textkit/slug.py", old_string=SLUG_FIX_OLD, new_string=SLUG_FIX_NEW
                ),
                done='slugify now returns "untitled" when a title has no words.',
            )
        if prompt == _norm(RUN_TESTS):
            if not answered_tools:
                return {"text": "", "tool_calls": [_call("shell", command=TEST_COMMAND)]}
            return {"text": _test_verdict(results)}
        if prompt == _norm(ADD_NOTE):
            n = _note_number(messages)
            return self._edit(
                answered_tools,
                results,
                _call(
                    "edit",
                    path="NOTES.md",
                    old_string=NOTES_MARKER,
                    new_string=f"- note {n}: written ahead of time\n{NOTES_MARKER}",
                ),
                done=f"Added note {n} to NOTES.md.",
            )
        return {
            "text": "(I am the demo's scripted model, so I only know a short tour: wait a moment "
            "for the grey suggestion below and press Tab, or try `count slowly`.)"
        }

    def _edit(
        self,
        answered_tools: bool,
        results: Sequence[ToolResult],
        call: dict[str, Any],
        *,
        done: str,
    ) -> dict[str, Any]:
        if not answered_tools:
            return {"text": "", "tool_calls": [call]}
        result = results[-1] if results else None
        if result is not None and result.output.startswith("Skipped"):
            return {"text": "All right, I left the files as they were."}
        if result is not None and result.is_error:
            return {"text": f"The edit did not apply: {result.output.splitlines()[0][:160]}"}
        return {"text": done}


def _test_verdict(results: Sequence[ToolResult]) -> str:
    result = results[-1] if results else None
    if result is None:
        return "The tests did not run."
    if result.output.startswith("Skipped"):
        return "All right, I did not run them."
    if "FAILED" in result.output or result.is_error:
        return "Some tests fail; the output is above."
    return "All the tests pass."


def demo_banner(workspace: Path, *, kept: bool) -> list[str]:
    where = str(workspace) if kept else f"{workspace} (removed on exit; --workspace DIR keeps it)"
    return [
        "fore chat --demo: a scripted model on a generated project, no key, no network.",
        f"workspace: {where}",
        "The demo asks its first question for you. Then type anything and press Enter: from the",
        "second answer on, a grey suggestion appears in the prompt while a speculation runs it.",
        "Tab applies its work at once; typing throws it away. /help lists the keys.",
    ]
