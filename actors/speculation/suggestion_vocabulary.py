"""The words, phrases and patterns the suggestion filter's rules match.

:mod:`fore.actors.speculation.suggestion_filter` holds the rules and their
order; this module holds only what they look for -- English, Japanese and
Chinese word lists (terminal words, meta phrases, leaked errors, AI-voice
openers, praise, labels, abbreviations) and the regular expressions built
from them once at import. It is data, kept apart so that the rules read as
logic and a vocabulary change is a change to this file alone. Every name here
is the filter's private table (hence the underscores); nothing else uses them.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

_QUOTE_PAIRS: Mapping[str, str] = MappingProxyType(
    {
        '"': '"',
        "'": "'",
        "“": "”",
        "‘": "’",
        "「": "」",
        "『": "』",
        "«": "»",
    }
)

_INVISIBLE = frozenset(
    "\u200b\u2060\ufeff\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
_LINE_BREAKS = frozenset("\n\r\u2028\u2029")

_DONE_WORDS = frozenset(
    {
        "done",
        "all done",
        "finished",
        "complete",
        "completed",
        "task complete",
        "task completed",
        "that's it",
        "that's all",
        "nothing else",
        "we're done",
        "i'm done",
    }
)

_META_EXACT = frozenset(
    {
        "none",
        "null",
        "nil",
        "n/a",
        "na",
        "nothing",
        "silence",
        "silent",
        "empty",
        "undefined",
        "unknown",
        "tbd",
        "no suggestion",
        "no suggestions",
        "no input",
    }
)

_META_PHRASES = (
    r"nothing to suggest",
    r"no suggestions?",
    r"no (?:obvious |clear )?next (?:step|input|action)s?",
    r"(?:stay|remain|keep|staying|remaining) silent",
    r"(?:be|being) silent",
    r"not obvious",
    r"nothing obvious",
    r"(?:can't|cannot|can not|unable to) (?:predict|suggest|tell|guess)",
    r"no prediction",
    r"the user(?:'s)? (?:might|will|would|may|could|should|probably|likely|wants)",
    r"(?:next|predicted) user input",
    r"(?:i|i'm|i am) not sure what",
    r"hard to (?:predict|say|tell)",
)

_ERROR_START_RE = re.compile(
    r"^(?:api[ _-]?error\b|(?:fatal |internal |unexpected |unknown )?error\s*:"
    r"|[a-z]*(?:error|exception)\s*:|traceback \(most recent call last\))"
)
_ERROR_PHRASES = (
    r"prompt is too long",
    r"rate[ -]limit(?:ed| exceeded| reached| hit| error)",
    r"context length exceeded",
    r"maximum context length",
    r"context window exceeded",
    r"quota exceeded",
    r"too many requests",
    r"internal server error",
    r"service unavailable",
    r"bad gateway",
    r"gateway timeout",
    r"request timed out",
    r"an error occurred",
    r"an error has occurred",
    r"something went wrong",
    r"invalid api key",
    r"overloaded_error",
    r"model is overloaded",
    r"failed to generate",
    r"(?:4|5)\d\d (?:error|bad request|unauthorized|forbidden|too many requests"
    r"|internal server error|service unavailable|overloaded)",
)

_KNOWN_LABELS = frozenset(
    {
        "suggestion",
        "suggested",
        "suggested prompt",
        "suggested input",
        "suggested reply",
        "next",
        "next step",
        "next input",
        "next prompt",
        "next action",
        "prediction",
        "predicted input",
        "user",
        "user input",
        "assistant",
        "ai",
        "answer",
        "response",
        "reply",
        "prompt",
        "input",
        "output",
        "command",
        "action",
        "recommendation",
        "note",
        "option",
        "tip",
        "hint",
        "you",
        "me",
        "human",
        "query",
        "result",
    }
)

_COMMIT_TYPES = frozenset(
    {
        "feat",
        "fix",
        "docs",
        "doc",
        "style",
        "refactor",
        "perf",
        "test",
        "tests",
        "build",
        "ci",
        "chore",
        "revert",
        "deps",
        "wip",
        "release",
        "security",
    }
)

_AI_VOICE_STARTS = (
    r"let me",
    r"i'll",
    r"i will",
    r"i can",
    r"i'm going to",
    r"i am going to",
    r"i(?:'ve| have) (?:made|updated|fixed|added|created|completed|finished|implemented)",
    r"here's",
    r"here is",
    r"here are",
    r"sure[,!]",
    r"certainly",
    r"of course",
    r"absolutely",
    r"great question",
    r"as an ai",
    r"would you like",
    r"do you want me",
    r"want me to",
    r"shall i",
    r"should i proceed",
    r"i hope",
    r"happy to help",
)

_EVALUATIVE_PHRASES = (
    r"thanks",
    r"thank you",
    r"thank u",
    r"thx",
    r"lgtm",
    r"(?:great|good|nice|awesome|excellent|amazing) (?:job|work)",
    r"well done",
    r"love it",
    r"much appreciated",
)
"""Praise that is evaluative wherever it appears."""

_EVALUATIVE_OPENERS = (
    r"(?:(?:that|this|it|everything|all) )?(?:looks?|sounds?|works?|seems?|is) "
    r"(?:good|great|fine|perfect|nice|amazing|awesome|excellent|better)",
    r"(?:that|this|it)'s (?:good|great|fine|perfect|nice|amazing|awesome|excellent|better)",
    r"much better",
)
"""Verdicts on the last answer; evaluative only at the start ("make sure it
looks good on mobile" is an instruction)."""

_EVALUATIVE_INTERJECTIONS = (
    r"perfect",
    r"nice",
    r"great",
    r"awesome",
    r"amazing",
    r"excellent",
    r"brilliant",
    r"wonderful",
    r"fantastic",
    r"beautiful",
    r"cool",
    r"good",
    r"wow",
    r"impressive",
)

_SINGLE_WORD_REPLIES = frozenset(
    {
        "yes",
        "y",
        "yep",
        "yeah",
        "no",
        "n",
        "nope",
        "ok",
        "okay",
        "sure",
        "continue",
        "proceed",
        "go",
        "push",
        "commit",
        "merge",
        "deploy",
        "ship",
        "retry",
        "approve",
        "accept",
        "reject",
        "undo",
        "revert",
        "rebase",
        "release",
        "publish",
        "again",
        "both",
        "all",
        "next",
    }
)

_ABBREVIATIONS = frozenset(
    {
        "vs",
        "e.g",
        "eg",
        "i.e",
        "ie",
        "etc",
        "cf",
        "dr",
        "mr",
        "mrs",
        "ms",
        "prof",
        "st",
        "jr",
        "sr",
        "inc",
        "ltd",
        "co",
        "approx",
        "incl",
        "fig",
        "no",
        "vol",
        "ver",
        "v",
        "min",
        "max",
        "resp",
        "esp",
        "al",
        "a.k.a",
        "aka",
        "u.s",
        "p.s",
        "ps",
    }
)

# Japanese and Chinese forms (no word boundaries: whole texts, substrings, or
# prefixes followed by punctuation, as each rule says).
_CJK_TRAILING = "。．！!？?.…、，, 　"

_CJK_DONE_WORDS = frozenset(
    {
        "完了",
        "完了した",
        "完了しました",
        "完了です",
        "全部完了",
        "すべて完了",
        "終わり",
        "終わった",
        "終わりました",
        "終了",
        "終了しました",
        "以上",
        "以上です",
        "おしまい",
        "完成",
        "完成了",
        "已完成",
        "全部完成",
        "全部完成了",
        "完了了",
        "好了",
        "结束",
        "结束了",
        "做完了",
        "搞定",
        "搞定了",
        "完毕",
        "就这样",
        "没有了",
    }
)

_CJK_META_EXACT = frozenset(
    {"なし", "無し", "特になし", "特にありません", "ありません", "无", "无。", "暂无", "没有", "空"}
)
_CJK_META_PHRASES = (
    "提案なし",
    "提案はありません",
    "提案できません",
    "提案は特に",
    "予測できません",
    "予測不可",
    "次の入力は",
    "ユーザーは次",
    "沈黙を守",
    "黙っていて",
    "没有建议",
    "无建议",
    "暂无建议",
    "没有下一步",
    "无法预测",
    "无法建议",
    "不确定下一步",
    "保持沉默",
    "用户可能",
    "用户会输入",
    "用户接下来",
)

_CJK_PRAISE = (
    "ありがとう",
    "有難う",
    "お疲れ様",
    "お疲れさま",
    "おつかれ",
    "助かりました",
    "よくできました",
    "さすが",
    "谢谢",
    "多谢",
    "感谢",
    "感謝",
    "辛苦了",
    "做得好",
    "干得好",
    "干得漂亮",
)
"""Thanks and praise, evaluative wherever they appear."""

_CJK_VERDICT_OPENERS = (
    "良さそう",
    "よさそう",
    "いい感じ",
    "良い感じ",
    "問題なさそう",
    "うまくいった",
    "看起来不错",
    "看起来很好",
    "看上去不错",
    "看起来没问题",
    "太好了",
    "真棒",
    "非常好",
)
"""Verdicts on the last answer: evaluative at the start, whatever follows."""

_CJK_INTERJECTIONS = (
    "完璧",
    "素晴らしい",
    "すごい",
    "最高",
    "いいね",
    "いいですね",
    "良いですね",
    "バッチリ",
    "完美",
    "不错",
    "很好",
    "很棒",
    "好极了",
    "厉害",
    "漂亮",
    "没问题",
    "棒",
)
"""Evaluative when standing alone or followed by punctuation (``完美哈希`` is a noun)."""


def _words_alternation(phrases: Iterable[str]) -> str:
    """One non-capturing alternation, longest first so the longest phrase wins."""
    ordered = sorted(phrases, key=len, reverse=True)
    return "(?:" + "|".join(ordered) + ")"


# Whole-word boundaries that treat hyphens and apostrophes as part of a word,
# so "great" does not match inside "great-circle" and "ty" not inside "ty's".
_WB_START = r"(?<![\w'-])"
_WB_END = r"(?![\w'-])"

_META_RE = re.compile(_WB_START + _words_alternation(_META_PHRASES) + _WB_END)
_ERROR_PHRASE_RE = re.compile(_WB_START + _words_alternation(_ERROR_PHRASES) + _WB_END)
_AI_VOICE_RE = re.compile("^" + _words_alternation(_AI_VOICE_STARTS) + r"(?:(?<=[,!])|(?![\w'-]))")
_EVALUATIVE_PHRASE_RE = re.compile(_WB_START + _words_alternation(_EVALUATIVE_PHRASES) + _WB_END)
_EVALUATIVE_START_RE = re.compile(
    "^(?:"
    + _words_alternation(_EVALUATIVE_OPENERS)
    + _WB_END
    + "|"
    + _words_alternation(_EVALUATIVE_INTERJECTIONS)
    + r"(?:\s*[,!.]|\s*$))"
)
_CJK_META_RE = re.compile(_words_alternation(re.escape(p) for p in _CJK_META_PHRASES))
_CJK_PRAISE_RE = re.compile(_words_alternation(re.escape(p) for p in _CJK_PRAISE))
_CJK_EVALUATIVE_START_RE = re.compile(
    "^(?:"
    + _words_alternation(re.escape(p) for p in _CJK_VERDICT_OPENERS)
    + "|"
    + _words_alternation(re.escape(p) for p in _CJK_INTERJECTIONS)
    + f"(?:[{re.escape(_CJK_TRAILING)}]|$))"
)
_LABEL_RE = re.compile(r"^(?P<label>[^\W\d_][\w'/-]*(?: [^\W\d_][\w'/-]*)?)\s*:\s")
_TITLECASE_WORD_RE = re.compile(r"^[A-Z][a-z]+$")

_FORMATTING_RES = (
    re.compile(r"```"),
    re.compile(r"^`[^`]+`$"),
    re.compile(r"\*\*(?=\S)[^*]+(?<=\S)\*\*"),
    # Multi-word only: a single word between double underscores is a dunder
    # name (``__init__``) far more often than emphasis.
    re.compile(r"(?<!\w)__(?=\S)[^_\s]*\s[^_]*(?<=\S)__(?!\w)"),
    re.compile(r"(?<![\w*])\*(?=[^\s*])[^*]+(?<=[^\s*])\*(?![\w*])"),
    re.compile(r"~~(?=\S)[^~]+(?<=\S)~~"),
    re.compile(r"^#{1,6}\s"),
    re.compile(r"^[-*+•]\s"),
    re.compile(r"^\d{1,3}[.)]\s"),
    re.compile(r"^>\s"),
    re.compile(r"\[[^\]]+\]\([^()\s]*\)"),
)

_SLASH_COMMAND_RE = re.compile(r"^/[A-Za-z][\w-]*(?::[\w-]+)*$")
_CJK_RE = re.compile(
    "[\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)
_CJK_SENTENCE_END_RE = re.compile(r"[。！？](?=\s*\S)")
_ALNUM_RE = re.compile(r"[^\W_]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_TRAILING_SENTENCE_PUNCT = ".!"
_CLOSERS = "\"')]}”’»」』"
_OPEN_TO_CLOSE: Mapping[str, str] = MappingProxyType({"(": ")", "[": "]"})
