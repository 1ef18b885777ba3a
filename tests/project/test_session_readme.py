"""The README's approval and asyncio examples run as printed (fresh interpreter, real files)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _example(marker: str) -> tuple[str, str]:
    """The Python block holding ``marker`` and the ``text`` block printed after it."""
    found = re.findall(
        r"```python\n(.*?)\n```\n\nIt prints:\n\n```text\n(.*?)\n```", README.read_text(), re.S
    )
    blocks = [(code, printed) for code, printed in found if marker in code]
    assert len(blocks) == 1, f"one README example with {marker!r}"
    return blocks[0]


def _run(code: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_approval_example_asks_and_the_refusal_keeps_the_file(tmp_path: Path) -> None:
    code, printed = _example("approver=approver")
    assert _run(code, tmp_path).strip() == printed
    assert (tmp_path / "notes" / "todo.txt").read_text() == "buy milk\n"


def test_the_asyncio_example_streams_and_presses_tab(tmp_path: Path) -> None:
    code, printed = _example("asyncio.run")
    assert _run(code, tmp_path).strip() == printed
    assert (tmp_path / "shop" / "prices.py").read_text() == "TAX = 0.25\n"
