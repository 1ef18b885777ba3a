"""The suggestion filter, the reply parser and the type-hint extractor.

Every rule is pinned in both directions: inputs it must reject (with exactly
its reason, which also pins the rule order) and near-misses it must let
through. Property tests cover what must hold for any text at all.
"""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from fore.actors.speculation.suggestion_filter import (
    MAX_CHARS,
    RULE_ORDER,
    RejectReason,
    SuggestionVerdict,
    count_units,
    filter_suggestion,
    normalize_suggestion,
    parse_suggestion_reply,
)
from fore.actors.speculation.suggestion_prompt import (
    SUGGESTION_PROMPT,
    TYPE_HINT_RE,
    extract_type_hint,
)

R = RejectReason

REJECTED: dict[RejectReason, list[str]] = {
    R.EMPTY: ["", "   \t ", '""', "' '", "“ ”"],
    R.CONTROL_CHARS: [
        "run\ttests",
        "run tests\x00 now",
        "run the \x1b[31mtests",
        "run\u202etests now",
        "run\u200btests now",
        "run tests\x85 now",
    ],
    R.FORMATTING: [
        "run tests\nthen commit",
        "run tests\r\nnow",
        "**run** the tests",
        "run the __unit tests__ now",
        "run *all* tests",
        "run ~~all~~ tests",
        "# run tests",
        "- run tests",
        "* run tests",
        "1. run tests",
        "> run tests",
        "```run tests```",
        "`npm test`",
        "see [the docs](http://example.com)",
    ],
    R.WRAPPED: ["(run tests)", "[silence]", "[run the tests]", "((yes))", "(no suggestion)"],
    R.DONE: ["done", "Done.", "all done!", "That’s it", "finished", "DONE"],
    R.META: [
        "nothing to suggest",
        "No suggestion",
        "stay silent",
        "silence",
        "n/a",
        "None",
        "null",
        "I will stay silent",
        "The user might run tests",
        "there is no obvious next step",
    ],
    R.ERROR_MESSAGE: [
        "API Error: 500 Internal Server Error",
        "Error: prompt is too long",
        "prompt is too long",
        "TypeError: x is undefined",
        "rate limit exceeded, retry later",
        "429 Too Many Requests",
        "an error occurred while generating",
    ],
    R.LABEL_PREFIX: [
        "Suggestion: run tests",
        "Next: push it",
        "next step: commit the fix",
        "User: run the tests",
        "Summary: tests pass now",
        "Answer : yes please",
    ],
    R.AI_VOICE: [
        "Let me run the tests",
        "I'll fix the test",
        "I will add the docs",
        "I can run the tests",
        "Here's the fix",
        "here is the plan",
        "Sure, run the tests",
        "Certainly, running tests now",
        "I’m going to refactor it",
    ],
    R.EVALUATIVE: [
        "thanks",
        "Thank you!",
        "looks good",
        "Great job",
        "perfect",
        "Nice!",
        "lgtm, merge it",
        "Perfect, commit it",
        "thanks, now push",
        "that looks great, ship it",
        "nice work on the parser",
    ],
    R.TOO_LONG: [
        "run " + "x" * 96,
        "refactor " + "y" * 200,
        "update internationalization localization configuration serialization "
        "deserialization normalization code",
    ],
    R.MULTIPLE_SENTENCES: [
        "Run tests. Then commit.",
        "Run tests! Commit them",
        "Why? Fix it",
        "Fix it. Push it",
        "运行测试。然后提交。",
        'Run "tests." Then commit',
    ],
    R.TOO_FEW_WORDS: ["tests", "x", "测", "refactor", "/", "...", "好"],
    R.TOO_MANY_WORDS: [
        "a b c d e f g h i j k l m",
        "please run all the unit tests and then the integration tests too now",
        "测" * 31,
        "运行" * 14 + " npm test now",
    ],
}

ACCEPTED: dict[RejectReason, list[str]] = {
    R.EMPTY: ["run tests", '"run tests"', "  yes  ", "'commit it'", "「运行测试」"],
    R.CONTROL_CHARS: [
        "run tests",
        "add 👨‍👩‍👧 emoji support",
        "می‌خواهم تست کنم",
        "fix the résumé parser",
    ],
    R.FORMATTING: [
        "edit __init__.py exports",
        "pass *args and **kwargs through",
        "run `make test` again",
        "rm *.pyc files",
        "fix issue #12",
        "multiply a * b * c",
        "fix the 2-step login",
    ],
    R.WRAPPED: [
        "(a) and (b) both",
        "run tests (unit only)",
        "[WIP] run tests",
        "(optional) add docs",
    ],
    R.DONE: [
        "done with tests, commit them",
        "mark the task done",
        "finish the migration",
        "complete the refactor",
    ],
    R.META: [
        "this issue needs a test",
        "add silence detection",
        "remove the none check",
        "handle null input",
        "make the user model immutable",
    ],
    R.ERROR_MESSAGE: [
        "add error handling",
        "rate limit the login endpoint",
        "fix the TypeError in parser",
        "shorten the prompt",
        "handle rate limit errors",
    ],
    R.LABEL_PREFIX: [
        "fix: typo",
        "Fix: typo in readme",
        "docs: update readme",
        "README: fix typo",
        "fix(parser): handle empty input",
        "run tests: unit only",
        "open http://localhost:8080 please",
    ],
    R.AI_VOICE: [
        "let's add tests",
        "sure",
        "move the helper here",
        "I can't reproduce, check logs",
        "make sure the tests pass",
        "surely this is wrong",
    ],
    R.EVALUATIVE: [
        "add great-circle distance",
        "make sure it looks good on mobile",
        "perfect hash for keywords",
        "add a Thanksgiving banner",
        "nicer error messages please",
        "good first issue label",
    ],
    R.TOO_LONG: [
        "run " + "x" * 95,
        "update the configuration loader so environment variables override",
        "运行" * 15,
    ],
    R.MULTIPLE_SENTENCES: [
        "compare A vs. B",
        "run e.g. unit tests only",
        "update app.py to 1.2",
        "ask Dr. Smith for review",
        "wait... then commit",
        "run tests.",
        "what changed?",
        "运行测试。",
    ],
    R.TOO_FEW_WORDS: [
        "/commit",
        "yes",
        "ok",
        "continue",
        "Yes!",
        "运行",
        "run tests",
        "/review-pr",
    ],
    R.TOO_MANY_WORDS: [
        "a b c d e f g h i j k l",
        "测" * 30,
        "运行 npm test",
        "please run all the unit tests and then integration tests",
    ],
}


def _cases(table: dict[RejectReason, list[str]]) -> list[tuple[RejectReason, str]]:
    return [(reason, text) for reason, texts in table.items() for text in texts]


def test_every_rule_has_three_examples_each_way() -> None:
    for reason in RejectReason:
        assert len(REJECTED[reason]) >= 3, reason
        assert len(ACCEPTED[reason]) >= 3, reason


@pytest.mark.parametrize(("reason", "text"), _cases(REJECTED))
def test_rejected_with_reason(reason: RejectReason, text: str) -> None:
    verdict = filter_suggestion(text)
    assert not verdict.accepted
    assert verdict.reason is reason


@pytest.mark.parametrize(("reason", "text"), _cases(ACCEPTED))
def test_near_miss_is_accepted(reason: RejectReason, text: str) -> None:
    verdict = filter_suggestion(text)
    assert verdict.accepted, (reason, verdict.reason)
    assert verdict.reason is None


def test_reason_names_are_stable_snake_case() -> None:
    assert [r.value for r in RULE_ORDER] == [
        "empty",
        "control_chars",
        "formatting",
        "wrapped",
        "done",
        "meta",
        "error_message",
        "label_prefix",
        "ai_voice",
        "evaluative",
        "too_long",
        "multiple_sentences",
        "too_few_words",
        "too_many_words",
    ]
    assert filter_suggestion("done").reason == "done"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # Each fails the named rule and a later one; the earlier rule wins.
        ("**thanks**", R.FORMATTING),  # formatting before evaluative
        ("(done)", R.WRAPPED),  # wrapped before done
        ("Suggestion: let me run it", R.LABEL_PREFIX),  # label before ai voice
        ("Let me say thanks", R.AI_VOICE),  # ai voice before evaluative
        ("thanks " + "x" * 100, R.EVALUATIVE),  # evaluative before too long
        ("Run. " + "x " * 20, R.MULTIPLE_SENTENCES),  # sentences before word count
        ("run\ttests\nnow", R.CONTROL_CHARS),  # control chars before formatting
    ],
)
def test_first_failing_rule_is_reported(text: str, reason: RejectReason) -> None:
    assert filter_suggestion(text).reason is reason


def test_verdict_text_is_normalized() -> None:
    assert filter_suggestion('  "run the tests"  ').text == "run the tests"
    assert filter_suggestion("“'yes'”").text == "yes"
    assert filter_suggestion(' "done" ').text == "done"
    assert filter_suggestion("'unbalanced").text == "'unbalanced"


def test_verdict_is_a_frozen_consistent_message() -> None:
    verdict = filter_suggestion("run the tests")
    with pytest.raises(ValidationError):
        verdict.accepted = False  # type: ignore[misc]
    with pytest.raises(ValidationError):
        SuggestionVerdict(accepted=True, text="x", reason=R.DONE)
    with pytest.raises(ValidationError):
        SuggestionVerdict(accepted=False, text="x")
    dumped = json.loads(filter_suggestion("done").model_dump_json())
    assert dumped == {"accepted": False, "text": "done", "reason": "done"}


def test_count_units() -> None:
    assert count_units("run the tests") == 3
    assert count_units("运行测试") == 4
    assert count_units("运行 npm test") == 4
    assert count_units("运行测试。") == 4


# --------------------------------------------------------------------------- #
# Reply parsing
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"suggestion": "run tests"}', "run tests"),
        ('  \n{"suggestion": "run tests"}\n ', "run tests"),
        ('```json\n{"suggestion": "commit it"}\n```', "commit it"),
        ('```\n{"suggestion": "commit it"}\n```', "commit it"),
        ('Here you go: {"suggestion": "push"} hope it helps', "push"),
        ('{"suggestion": "use {braces}"}', "use {braces}"),
        ('{not json} {"suggestion": "second"}', "second"),
        ('{"other": 1} {"suggestion": "later"}', "later"),
        ('{"suggestion": "运行测试"}', "运行测试"),
        ('{"suggestion": null}', None),
        ('{"suggestion": ""}', None),
        ('{"suggestion": 3}', None),
        ('{"suggestion": ["a"]}', None),
        ('{"other": "x"}', None),
        ('{"outer": {"suggestion": "nested"}}', None),
        ("run tests", None),
        ('"run tests"', None),
        ("", None),
        ("{", None),
        ("[" * 100_000, None),
        ("{" * 100_000, None),
        ('{"a":' * 5_000, None),
        ("x {" * 5 + '{"suggestion": "y"}', "y"),
        # Past MAX_REPLY_CANDIDATES braces the reply is treated as garbage.
        ("x {" * 40 + '{"suggestion": "y"}', None),
    ],
)
def test_parse_suggestion_reply(raw: str, expected: str | None) -> None:
    assert parse_suggestion_reply(raw) == expected


# --------------------------------------------------------------------------- #
# Type hints and the prompt
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        ("Done. Type `yes` to continue.", "yes"),
        ("Type 'deploy' to ship", "deploy"),
        ('Ready? Reply with "go"', "go"),
        ("Type yes to continue", "yes"),
        ("If you agree, type /commit when ready.", "/commit"),
        ("You can reply “ship it” to release", "ship it"),
        ('When ready, type "don\'t stop" now', "don't stop"),
        ("First, type y to confirm.\nOr type `abort` to stop.", "abort"),
        ("Just enter retry if it fails", "retry"),
        ("Run type checking to find bugs.", None),
        ("Reply to it when you can", None),
        ("Send it to production", None),
        ("The prototype works", None),
        ('type "unterminated', None),
        ("", None),
    ],
)
def test_extract_type_hint(answer: str, hint: str | None) -> None:
    assert extract_type_hint(answer) == hint


def test_type_hint_regex_exposes_groups() -> None:
    match = TYPE_HINT_RE.search("type `yes` to continue")
    assert match is not None
    assert match.group("quoted") == "yes"
    bare = TYPE_HINT_RE.search("reply yes to go on")
    assert bare is not None
    assert bare.group("bare") == "yes"


def test_prompt_asks_for_json_and_silence() -> None:
    assert '{"suggestion": null}' in SUGGESTION_PROMPT
    assert "2 to 12 words" in SUGGESTION_PROMPT
    assert "type yes to continue" in SUGGESTION_PROMPT
    # The prompt's own silence example parses as silence.
    assert parse_suggestion_reply(SUGGESTION_PROMPT.rsplit("\n", 1)[-1]) is None


# --------------------------------------------------------------------------- #
# Properties
# --------------------------------------------------------------------------- #

_ANY_CHAR = st.characters(exclude_categories=())  # surrogates included
_WORDS = st.sampled_from(
    [
        "run",
        "the",
        "tests",
        "commit",
        "yes",
        "fix",
        "app.py",
        "vs.",
        "done",
        "thanks",
        "运行",
        "测试",
        "Let",
        "me",
        "Next:",
        "e.g.",
        "great-circle",
        "x" * 30,
        "(",
        ")",
        '"',
        ".",
        "/commit",
    ]
)
_SUGGESTION_LIKE = st.lists(_WORDS, min_size=0, max_size=16).map(" ".join)
_CJK_CHAR_RE = re.compile(
    "[\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)


def _check_accepted_invariants(verdict: SuggestionVerdict) -> None:
    if not verdict.accepted:
        assert verdict.reason is not None
        return
    text = verdict.text
    assert text and text == text.strip()
    assert len(text) < MAX_CHARS
    if _CJK_CHAR_RE.search(text):
        assert len(_CJK_CHAR_RE.findall(text)) <= 30
    else:
        assert len(text.split()) <= 12
    assert "\n" not in text and "\r" not in text
    assert not any(unicodedata.category(c) in ("Cc", "Cs") for c in text)
    # Accepting is stable: the shown text passes the filter unchanged.
    again = filter_suggestion(text)
    assert again.accepted and again.text == text


@given(st.text(alphabet=_ANY_CHAR, max_size=200))
def test_filter_never_raises_and_invariants_hold(text: str) -> None:
    verdict = filter_suggestion(text)
    _check_accepted_invariants(verdict)
    verdict.model_dump_json()  # always serializable


@given(_SUGGESTION_LIKE)
def test_invariants_hold_for_suggestion_like_text(text: str) -> None:
    _check_accepted_invariants(filter_suggestion(text))


@given(st.text(alphabet=_ANY_CHAR, max_size=50))
def test_normalization_is_idempotent(text: str) -> None:
    once = normalize_suggestion(text)
    assert normalize_suggestion(once) == once


@given(st.text(min_size=1), st.booleans())
def test_parse_reply_round_trips_any_string(suggestion: str, ascii_only: bool) -> None:
    raw = json.dumps({"suggestion": suggestion}, ensure_ascii=ascii_only)
    assert parse_suggestion_reply(raw) == suggestion
    assert parse_suggestion_reply(f"```json\n{raw}\n```") == suggestion
    assert parse_suggestion_reply(f"Sure! Here it is: {raw} -- enjoy") == suggestion


@given(st.text(alphabet=_ANY_CHAR, max_size=200))
def test_parse_reply_never_raises(raw: str) -> None:
    result = parse_suggestion_reply(raw)
    assert result is None or (isinstance(result, str) and result != "")


@given(st.text(alphabet=_ANY_CHAR, max_size=200))
def test_extract_type_hint_never_raises(answer: str) -> None:
    hint = extract_type_hint(answer)
    assert hint is None or (hint == hint.strip() and hint != "")


# -- Japanese and Chinese forms of the done / meta / evaluative rules --

CJK_REJECTED: dict[RejectReason, list[str]] = {
    R.DONE: ["完了", "完了しました。", "以上です", "終わりました！", "完成了", "搞定", "结束了。"],
    R.META: [
        "なし",
        "特になし",
        "提案はありません",
        "予測できません",
        "没有建议",
        "暂无",
        "保持沉默",
    ],
    R.EVALUATIVE: [
        "ありがとう",
        "ありがとうございます、次へ",
        "良さそう",
        "良さそうなのでコミットして",
        "いいね！",
        "完璧",
        "谢谢",
        "辛苦了",
        "看起来不错",
        "太好了，提交吧",
        "完美",
        "不错，提交吧",
    ],
}

CJK_ACCEPTED: dict[RejectReason, list[str]] = {
    R.DONE: ["テストを完了して", "完了したタスクを一覧にして", "完成登录功能", "结束进程前先保存"],
    R.META: ["なしの場合を処理して", "空のリストを処理して", "查看没有的文件"],
    R.EVALUATIVE: ["完美哈希を実装して", "实现完美哈希", "不错误处理的路径", "最高値を計算して"],
}


@pytest.mark.parametrize(("reason", "text"), _cases(CJK_REJECTED))
def test_cjk_forms_are_rejected_with_reason(reason: RejectReason, text: str) -> None:
    verdict = filter_suggestion(text)
    assert verdict.reason is reason, (text, verdict.reason)


@pytest.mark.parametrize(("reason", "text"), _cases(CJK_ACCEPTED))
def test_cjk_near_misses_are_accepted(reason: RejectReason, text: str) -> None:
    verdict = filter_suggestion(text)
    assert verdict.accepted, (reason, text, verdict.reason)
