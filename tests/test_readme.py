"""The README's Python example runs as printed (in a fresh interpreter, on a real workspace)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_session_api_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)\n```", README.read_text(), re.S)
    assert blocks, "the README has no Python example"
    (tmp_path / "myproject").mkdir()
    (tmp_path / "myproject" / "app.py").write_text("def main():\n    return 1\n")
    done = subprocess.run(
        [sys.executable, "-c", blocks[0]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # the @app.py reference was attached, the tool ran, the scripted answer came back
    assert done.stdout.strip() == (
        "completed ['user', 'system', 'assistant', 'tool_result', 'assistant']"
    )
