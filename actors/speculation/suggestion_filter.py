"""Decide whether a predicted next input is worth showing to the user.

After each answer Fore asks a model to predict what the user will type next.
The prediction is shown as ghost text and, on Tab, submitted as if the user
had typed it -- and speculation starts executing it before the user has even
looked. A bad suggestion therefore costs attention *and* tokens, so a
candidate must look like something this user would type: a short imperative
in their voice. Models fail that in recurring ways (talking about the task
instead of predicting it, answering in their own voice, praising, formatting,
leaking an error string); each way is one rule with a stable reason name.
The words and patterns the rules match are data, in
:mod:`fore.actors.speculation.suggestion_vocabulary`.

Normalization
-------------
The candidate is stripped of surrounding whitespace and then of matching
surrounding quote pairs (``"…"``, ``'…'``, ``“…”``, ``‘…’``, ``「…」``,
``『…』``, ``«…»``), repeatedly. The result is :attr:`SuggestionVerdict.text`,
for accepted and rejected candidates alike (lone surrogates, which only a
rejected candidate can hold, are replaced by U+FFFD so the verdict is always
JSON-serializable).

Rules, in the order they are checked (the first failing rule is reported)
--------------------------------------------------------------------------
 1. ``empty`` -- nothing left after normalization.
 2. ``control_chars`` -- a C0/C1 control character other than a line break
    (a tab is a control character here), a lone surrogate, or an invisible
    character that can spoof text: zero-width space, word joiner, BOM, bidi
    embeddings/overrides/isolates and marks. ZWJ/ZWNJ are allowed (emoji,
    Persian, Indic scripts need them).
 3. ``formatting`` -- a line break (``\\n``, ``\\r``, U+2028, U+2029), a code
    fence (```` ``` ````), a text wholly in one backtick span, markdown
    emphasis (``**x**``, ``*x*``, ``~~x~~``, and ``__x y__`` with at least
    two words, because ``__init__`` is a dunder name), a heading
    (``# x``), a bullet (``- x``, ``* x``, ``+ x``, ``• x``), a numbered list
    item (``1. x``, ``1) x``), a block quote (``> x``) or a markdown link
    (``[x](y)``). An inline code span inside a sentence is fine: users type
    ``run `make test```.
 4. ``wrapped`` -- the whole text is one bracketed group, ``(…)`` or
    ``[…]``, the model's way of writing a stage direction. ``(a) and (b)`` is
    not wrapped: the first bracket closes before the end.
 5. ``done`` -- the whole text (case-insensitive, trailing ``.!`` ignored) is
    a terminal word such as ``done``, ``finished``, ``all done``,
    ``that's it`` -- or its Japanese or Chinese form (``完了``, ``終わりました``,
    ``以上です``, ``完成了``, ``搞定``, ``结束了``, …; trailing ``。！`` ignored).
    Such words inside a longer instruction are fine (``done with tests,
    commit them``, ``テストを完了して``, ``完成登录功能``): only a suggestion
    that *is* a terminal word says "the conversation is over".
 6. ``meta`` -- text about suggesting rather than a suggestion: the whole text
    is one of ``none``, ``null``, ``n/a``, ``silence``, ``nothing``, … or it
    contains a meta phrase as whole words (``nothing to suggest``,
    ``no suggestion``, ``stay silent``, ``the user might``, …). Japanese and
    Chinese: the whole text is ``なし``, ``特になし``, ``无``, ``暂无``, … or it
    contains ``提案なし``, ``提案はありません``, ``予測できません``,
    ``没有建议``, ``无法预测``, ``保持沉默``, ``用户可能``, …
    ``add silence detection``, ``this issue needs a test`` and
    ``なしの場合を処理して`` are fine.
 7. ``error_message`` -- a leaked error string: starts with ``error:``,
    ``api error``, ``<Something>Error:``/``Exception:``, or contains
    ``prompt is too long``, ``rate limit exceeded``/``rate limited``,
    ``context length exceeded``, ``too many requests``,
    ``internal server error``, ``an error occurred``, … ``add error handling``
    and ``rate limit the login endpoint`` are fine.
 8. ``label_prefix`` -- ``Label: …``: the text before the first ``": "`` is a
    known label (``suggestion``, ``next``, ``next step``, ``user``,
    ``answer``, ``prompt``, … any case) or a single capitalised word
    (``Summary: …``, first letter upper, the rest lower) that is not a
    conventional-commit type. So ``fix: typo``, ``Fix: typo``,
    ``docs: update readme``, ``README: fix typo`` and ``fix(parser): x`` are
    fine.
 9. ``ai_voice`` -- starts with the assistant's voice, matched on whole
    words: ``let me``, ``I'll``, ``I will``, ``I can``, ``I'm going to``,
    ``here's``, ``here is``, ``sure,``, ``certainly``, ``of course``,
    ``absolutely``, ``would you like``, ``shall I``, ``as an AI``, …
    ``let's add tests`` (the user's voice), ``here`` and ``sure`` alone are
    fine.
10. ``evaluative`` -- praise or thanks instead of an instruction: contains
    a whole-word phrase such as ``thanks``, ``thank you``, ``great job``,
    ``nice work``, ``lgtm``, ``well done``; or *starts* with a verdict
    (``looks good``, ``that works great``, ``sounds good``, ``much
    better``) or with an interjection adjective (``perfect``, ``nice``,
    ``great``, ``awesome``, …) that stands alone or is followed by
    ``,``/``!``/``.``. ``add great-circle distance``, ``perfect hash for
    keywords`` and ``make sure it looks good on mobile`` are fine.
    Japanese and Chinese: thanks and praise anywhere (``ありがとう``,
    ``谢谢``, ``お疲れ様``, ``辛苦了``, ``做得好``, …); a verdict at the start
    (``良さそう``, ``いい感じ``, ``看起来不错``, ``太好了``, …); or an
    interjection (``完璧``, ``素晴らしい``, ``いいね``, ``完美``, ``不错``,
    ``很好``, …) standing alone or followed by punctuation.
    ``实现完美哈希`` and ``完美哈希を実装して`` are fine.
11. ``too_long`` -- 100 characters or more.
12. ``multiple_sentences`` -- a sentence terminator (``.``, ``!``, ``?``)
    ends a whitespace-separated token that is not the last one, or a CJK
    terminator (``。！？``) is followed by more text. A ``.`` does not end a
    sentence after an abbreviation (``vs.``, ``e.g.``, ``i.e.``, ``etc.``,
    ``Dr.``, …), a single-letter initial or an ellipsis; dots inside a token
    (``app.py``, ``1.2``) never do.
13. ``too_few_words`` -- fewer than 2 units, unless the text is a slash
    command (``/commit``) or a known one-word reply (``yes``, ``y``, ``no``,
    ``ok``, ``okay``, ``sure``, ``continue``, ``proceed``, ``go``, ``push``,
    ``commit``, ``merge``, ``deploy``, ``retry``, …; any case, a trailing
    ``.``/``!`` ignored).
14. ``too_many_words`` -- more than 12 words, or more than 30 units in CJK
    text.

Counting units
--------------
Text containing Han, Hiragana or Katakana (languages written without spaces)
counts each such character as one unit plus one unit per whitespace-separated
run of other characters that contains a letter or digit (``运行 npm test`` is 2 +
2 = 4 units); the range is 2-30. Other text, Korean included (it separates
words with spaces), counts whitespace-separated tokens as words; the range is
2-12.
"""

from __future__ import annotations

import json
import unicodedata
from enum import StrEnum

from pydantic import model_validator

from fore.actors.speculation.suggestion_vocabulary import (
    _ABBREVIATIONS,
    _AI_VOICE_RE,
    _ALNUM_RE,
    _CJK_DONE_WORDS,
    _CJK_EVALUATIVE_START_RE,
    _CJK_META_EXACT,
    _CJK_META_RE,
    _CJK_PRAISE_RE,
    _CJK_RE,
    _CJK_SENTENCE_END_RE,
    _CJK_TRAILING,
    _CLOSERS,
    _COMMIT_TYPES,
    _DONE_WORDS,
    _ERROR_PHRASE_RE,
    _ERROR_START_RE,
    _EVALUATIVE_PHRASE_RE,
    _EVALUATIVE_START_RE,
    _FORMATTING_RES,
    _INVISIBLE,
    _KNOWN_LABELS,
    _LABEL_RE,
    _LINE_BREAKS,
    _META_EXACT,
    _META_RE,
    _OPEN_TO_CLOSE,
    _QUOTE_PAIRS,
    _SINGLE_WORD_REPLIES,
    _SLASH_COMMAND_RE,
    _SURROGATE_RE,
    _TITLECASE_WORD_RE,
    _TRAILING_SENTENCE_PUNCT,
)
from fore.messages.base import Message

MAX_WORDS = 12
MAX_CJK_UNITS = 30
MIN_UNITS = 2
MAX_CHARS = 100
"""A suggestion must be strictly shorter than this many characters."""


class RejectReason(StrEnum):
    """Why a suggestion was rejected; the value is the stable snake_case name."""

    EMPTY = "empty"
    CONTROL_CHARS = "control_chars"
    FORMATTING = "formatting"
    WRAPPED = "wrapped"
    DONE = "done"
    META = "meta"
    ERROR_MESSAGE = "error_message"
    LABEL_PREFIX = "label_prefix"
    AI_VOICE = "ai_voice"
    EVALUATIVE = "evaluative"
    TOO_LONG = "too_long"
    MULTIPLE_SENTENCES = "multiple_sentences"
    TOO_FEW_WORDS = "too_few_words"
    TOO_MANY_WORDS = "too_many_words"


RULE_ORDER: tuple[RejectReason, ...] = tuple(RejectReason)
"""The rules in the order :func:`filter_suggestion` checks them."""


class SuggestionVerdict(Message):
    """The filter's decision on one candidate.

    A frozen pydantic message (not a dataclass) because the verdict travels:
    the controller logs it and the session emits rejected and accepted
    suggestions as telemetry events, which must serialize like every other
    Fore message.
    """

    accepted: bool
    text: str
    """The normalized suggestion (stripped, surrounding quotes removed)."""
    reason: RejectReason | None = None
    """The first failing rule, or None when accepted."""

    @model_validator(mode="after")
    def _reason_iff_rejected(self) -> SuggestionVerdict:
        if self.accepted == (self.reason is not None):
            raise ValueError("a verdict has a reason exactly when it is rejected")
        return self


# --------------------------------------------------------------------------- #
# The filter
# --------------------------------------------------------------------------- #


def filter_suggestion(text: str) -> SuggestionVerdict:
    """Check a candidate against every rule; see the module doc for the order."""
    normalized = normalize_suggestion(text)
    reason = _first_failure(normalized)
    return SuggestionVerdict(
        accepted=reason is None,
        text=_SURROGATE_RE.sub("\ufffd", normalized),
        reason=reason,
    )


def normalize_suggestion(text: str) -> str:
    """Strip whitespace and matching surrounding quote pairs, repeatedly."""
    current = text.strip()
    while len(current) >= 2 and _QUOTE_PAIRS.get(current[0]) == current[-1]:
        current = current[1:-1].strip()
    return current


def count_units(text: str) -> int:
    """Words, or for Han/Kana text characters plus other words (module doc)."""
    if not _CJK_RE.search(text):
        return len(text.split())
    units = len(_CJK_RE.findall(text))
    for run in _CJK_RE.split(text):
        units += sum(1 for token in run.split() if _ALNUM_RE.search(token))
    return units


def _first_failure(text: str) -> RejectReason | None:
    if not text:
        return RejectReason.EMPTY
    if _has_control_chars(text):
        return RejectReason.CONTROL_CHARS
    if _has_formatting(text):
        return RejectReason.FORMATTING
    if _is_wrapped(text):
        return RejectReason.WRAPPED
    lowered = _fold(text)
    bare = lowered.rstrip(_TRAILING_SENTENCE_PUNCT).strip()
    cjk = bool(_CJK_RE.search(text))
    cjk_bare = text.strip().rstrip(_CJK_TRAILING) if cjk else ""
    if bare in _DONE_WORDS or cjk_bare in _CJK_DONE_WORDS:
        return RejectReason.DONE
    if bare in _META_EXACT or _META_RE.search(lowered):
        return RejectReason.META
    if cjk and (cjk_bare in _CJK_META_EXACT or _CJK_META_RE.search(text)):
        return RejectReason.META
    if _ERROR_START_RE.match(lowered) or _ERROR_PHRASE_RE.search(lowered):
        return RejectReason.ERROR_MESSAGE
    if _has_label_prefix(text):
        return RejectReason.LABEL_PREFIX
    if _AI_VOICE_RE.match(lowered):
        return RejectReason.AI_VOICE
    if _EVALUATIVE_PHRASE_RE.search(lowered) or _EVALUATIVE_START_RE.match(lowered):
        return RejectReason.EVALUATIVE
    if cjk and (_CJK_PRAISE_RE.search(text) or _CJK_EVALUATIVE_START_RE.match(text.strip())):
        return RejectReason.EVALUATIVE
    if len(text) >= MAX_CHARS:
        return RejectReason.TOO_LONG
    if _has_several_sentences(text):
        return RejectReason.MULTIPLE_SENTENCES
    units = count_units(text)
    if units < MIN_UNITS and not _is_allowed_single(bare):
        return RejectReason.TOO_FEW_WORDS
    limit = MAX_CJK_UNITS if _CJK_RE.search(text) else MAX_WORDS
    if units > limit:
        return RejectReason.TOO_MANY_WORDS
    return None


def _fold(text: str) -> str:
    """Lowercase with typographic apostrophes made ASCII, for phrase matching."""
    return text.replace("’", "'").replace("‘", "'").casefold()


def _has_control_chars(text: str) -> bool:
    for c in text:
        if c in _LINE_BREAKS:
            continue
        if c in _INVISIBLE or unicodedata.category(c) in ("Cc", "Cs"):
            return True
    return False


def _has_formatting(text: str) -> bool:
    if any(c in _LINE_BREAKS for c in text):
        return True
    return any(pattern.search(text) for pattern in _FORMATTING_RES)


def _is_wrapped(text: str) -> bool:
    """Whether the first character opens a bracket that the last one closes."""
    closer = _OPEN_TO_CLOSE.get(text[0])
    if closer is None or text[-1] != closer:
        return False
    depth = 0
    for index, c in enumerate(text):
        if c == text[0]:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return index == len(text) - 1
    return False


def _has_label_prefix(text: str) -> bool:
    match = _LABEL_RE.match(text)
    if match is None:
        return False
    label = match.group("label")
    folded = _fold(label)
    if folded in _KNOWN_LABELS:
        return True
    return bool(_TITLECASE_WORD_RE.match(label)) and folded not in _COMMIT_TYPES


def _has_several_sentences(text: str) -> bool:
    if _CJK_SENTENCE_END_RE.search(text):
        return True
    tokens = text.split()
    return any(_ends_sentence(token) for token in tokens[:-1])


def _ends_sentence(token: str) -> bool:
    core = token.rstrip(_CLOSERS)
    if not core or core[-1] not in ".!?":
        return False
    if core[-1] != ".":
        return True
    if core.endswith(".."):
        return False  # an ellipsis trails off; it does not end the sentence
    word = _fold(core[:-1]).lstrip("\"'([{“‘«")
    if word in _ABBREVIATIONS:
        return False
    return not (len(word) == 1 and word.isalpha())  # an initial: "J. Smith"


def _is_allowed_single(bare: str) -> bool:
    return bare in _SINGLE_WORD_REPLIES or bool(_SLASH_COMMAND_RE.match(bare))


# --------------------------------------------------------------------------- #
# The model's reply
# --------------------------------------------------------------------------- #

_DECODER = json.JSONDecoder()
MAX_REPLY_CANDIDATES = 32
"""How many ``{`` positions :func:`parse_suggestion_reply` tries at most."""
_SUGGESTION_KEY = "suggestion"


def parse_suggestion_reply(raw: str) -> str | None:
    """The suggestion in the model's raw reply, or None for silence.

    The model is asked for exactly ``{"suggestion": "…"}``, but fast models
    wrap it in code fences or a sentence of prose. The first JSON object in
    the reply that has a ``"suggestion"`` key at its top level wins (objects
    nested inside an earlier object are not considered); its value is
    returned verbatim when it is a non-empty string. ``null``, ``""``, a
    non-string value, no such object, or no JSON at all mean silence: a reply
    we cannot read is never guessed at.

    At most :data:`MAX_REPLY_CANDIDATES` ``{`` positions are tried, which
    keeps an adversarial reply (``{"a":{"a":…`` repeated) linear instead of
    quadratic; a real reply has its object among the first few braces.
    """
    index = raw.find("{")
    attempts = 0
    while index != -1 and attempts < MAX_REPLY_CANDIDATES:
        attempts += 1
        try:
            value, end = _DECODER.raw_decode(raw, index)
        except (ValueError, RecursionError):
            index = raw.find("{", index + 1)
            continue
        if isinstance(value, dict) and _SUGGESTION_KEY in value:
            suggestion = value[_SUGGESTION_KEY]
            return suggestion if isinstance(suggestion, str) and suggestion else None
        index = raw.find("{", end)
    return None


__all__ = [
    "MAX_CHARS",
    "MAX_CJK_UNITS",
    "MAX_REPLY_CANDIDATES",
    "MAX_WORDS",
    "MIN_UNITS",
    "RULE_ORDER",
    "RejectReason",
    "SuggestionVerdict",
    "count_units",
    "filter_suggestion",
    "normalize_suggestion",
    "parse_suggestion_reply",
]
