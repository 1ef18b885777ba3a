"""The prompt that asks a model to predict the user's next input, and hint spotting.

One prompt serves the first suggestion after an answer and the pipelined
suggestion after a completed speculation, so both are judged by the same
standard (the seed reuses one constant for exactly this reason). The prompt
is meant to be the last user turn of a fork that shares the main request's
prefix, so it is a constant with no per-request data: everything before it
stays byte-identical and the provider's prefix cache keeps hitting.

The prompt asks for what :mod:`actors.speculation.suggestion_filter` accepts;
the filter stays the authority because models do not always comply.
"""

from __future__ import annotations

import re

SUGGESTION_PROMPT = """\
[Next-input prediction]
Stop acting as the assistant for one reply. Predict the very next message the \
user will type into this coding session, so it can be offered to them as a \
one-key completion. Do not carry out any work and do not answer anything \
yourself; only predict.

Write it as the user would:
- an instruction they would type to you, in their own voice and in the \
language they have been writing in (imperative, e.g. "run the tests", \
"commit and push", "add a test for the empty case");
- 2 to 12 words (in Chinese or Japanese, at most 30 characters), one \
sentence, plain text: no markdown, no quotes around it, no line breaks, no \
label such as "Suggestion:";
- a single-word reply only when that is what they would type: "yes", \
"continue", "commit", or a slash command such as "/commit".

Prefer the step that follows most directly from your last answer. If your \
last answer told the user to type or reply with something specific (for \
example "type yes to continue" or "reply deploy to ship"), predict exactly \
that text.

Never write in your own voice ("Let me…", "I'll…", "Here's…", "Sure,…"), \
never praise or thank ("looks good", "thanks", "perfect"), never describe \
what the user might do, and never repeat an error message.

When the next step is not obvious, or the work is finished, stay silent: \
a wrong guess costs the user more than no guess.

Answer with ONLY this JSON object and nothing else:
{"suggestion": "<the user's next input>"}
or, to stay silent:
{"suggestion": null}"""
"""The instruction for the suggestion and pipelined-suggestion requests."""

TYPE_HINT_RE = re.compile(
    r"""
    (?:(?:^|(?<=[.!?:;,(]))[ \t]*|\b(?:just|simply|please|then|or|and|can|could|may|now|to)\s+)
    (?:
        (?:type|reply|respond|answer|say|enter|send|write)(?:\s+(?:with|in))?\s+
        (?:(?P<bt>`)|(?P<dq>")|(?P<sq>')|(?P<cdq>“)|‘)
        (?P<quoted>[^\n]{1,60}?)
        (?(bt)`|(?(dq)"|(?(sq)'|(?(cdq)”|’))))
      |
        (?:type|reply|respond|enter)(?:\s+with)?\s+
        (?!(?:it|its|this|that|these|those|them|the|a|an|some|something|anything|here
            |there|me|you|your|my|in|out|on|off|up|down|of|for|and|or)\b)
        (?P<bare>/?[^\W_][\w/-]{0,40})
        (?=\s+(?:to|if|when|and|or)\b|[ \t]*[,.;:!?)]|[ \t]*$)
    )
    """,
    re.IGNORECASE | re.VERBOSE | re.MULTILINE,
)
"""A "type X to …" / "reply with `X`" hint in an answer.

Group ``quoted`` holds a quoted hint (in backticks, straight or curly
quotes, closed by the matching quote, at most 60 characters on one line),
group ``bare`` an unquoted one-word hint such as ``yes`` or ``/commit``. The
verb must start a clause -- the start of a line, after sentence punctuation,
or after a connective such as "just", "then", "or", "can", "to" -- so that
prose like "run type checking to find bugs" is not taken for a hint. A bare
hint must be followed by a clause connective ("to", "if", "when", "and",
"or"), punctuation or the end of the line, and cannot be a pronoun, article
or preposition ("reply to it" is not a hint).
"""


def extract_type_hint(last_answer: str) -> str | None:
    """The text the last answer told the user to type, or None.

    When an answer ends by telling the user what to type ("Type `yes` to
    continue"), that text is the best possible prediction, so the generator
    prefers it over the model's guess. With several hints the last one wins:
    an answer's closing instruction is the one the user is about to act on.
    """
    hint: str | None = None
    for match in TYPE_HINT_RE.finditer(last_answer):
        value = match.group("quoted") or match.group("bare")
        if value is not None and value.strip():
            hint = value.strip()
    return hint


__all__ = ["SUGGESTION_PROMPT", "TYPE_HINT_RE", "extract_type_hint"]
