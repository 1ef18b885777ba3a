"""Make tool output valid Unicode before it leaves the pool.

Python strings can hold *lone surrogates* that no UTF-8 encoder accepts. The
usual source is a file name that is not valid UTF-8: ``os.fsdecode`` turns
each undecodable byte ``0xNN`` into ``U+DCNN`` (the ``surrogateescape``
scheme), so ``list_directory`` of a directory holding ``b"caf\\xe9.txt"``
yields ``"caf\\udce9.txt"``. Such a string makes ``json.dumps(...).encode()``,
pydantic's JSON, the blob store and the HTTP request to the LLM fail far
away from the tool that produced it.

:func:`valid_unicode` fixes it at the source, visibly and reversibly to a
reader:

* ``U+DC80``..``U+DCFF`` (an escaped byte) becomes the four characters
  ``\\xNN`` -- ``caf\\xe9.txt`` -- so the model sees which byte it was;
* a high surrogate directly followed by a low one is joined into the
  character the pair encodes (what UTF-16 meant);
* any other lone surrogate becomes U+FFFD (the replacement character).

Valid text is returned unchanged (the same object), at the cost of one
UTF-8 encode that fails fast on the first surrogate.
"""

from __future__ import annotations

import re
from typing import Any

from fore.messages.blobs import Inline, Stored, Structured, Text

_SURROGATES = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")


def _fix(match: re.Match[str]) -> str:
    text = match.group()
    if len(text) == 2:
        high, low = (ord(c) for c in text)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    code = ord(text)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return "\ufffd"


def valid_unicode(text: str) -> str:
    """``text`` with every surrogate escaped or replaced (see module docs)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub(_fix, text)
    return text


def valid_json(value: Any) -> Any:
    """A JSON value with every string (and object key) made valid; unchanged if it was."""
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, list):
        items = [valid_json(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        pairs = [(valid_unicode(k), valid_json(v)) for k, v in value.items()]
        same = all(
            k2 is k1 and v2 is v1 for (k2, v2), (k1, v1) in zip(pairs, value.items(), strict=True)
        )
        return value if same else dict(pairs)
    return value


def valid_output(output: Inline | Stored | None) -> Inline | Stored | None:
    """A tool's own ``Inline``/``Stored`` output with valid text; the same object if it was."""
    if isinstance(output, Inline):
        text = valid_unicode(output.text)
        return output if text is output.text else Inline(text=text)
    if isinstance(output, Stored):
        summary = valid_unicode(output.summary)
        content = output.content
        if isinstance(content, Text):
            text = valid_unicode(content.text)
            new_content: Text | Structured = content if text is content.text else Text(text=text)
        else:
            value = valid_json(content.value)
            new_content = content if value is content.value else Structured(value=value)
        if summary is output.summary and new_content is content:
            return output
        return Stored(summary=summary, content=new_content)
    return output
