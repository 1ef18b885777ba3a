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


def test_the_readme_documents_the_bench_and_run_options_that_exist() -> None:
    """What the README promises about the CLI is what the parser accepts."""
    from fore.bench.load import THINK_DISTS
    from fore.supervision.cli import build_parser

    text = README.read_text()
    for choice in THINK_DISTS:
        assert build_parser().parse_args(["bench", "--think-dist", choice]).think_dist == choice
        assert f"`{choice}`" in text, choice
    for name in ("FORE_BASE_URL", "OPENAI_BASE_URL", "FORE_MODEL", "OPENAI_MODEL"):
        assert name in text
    assert "--base-url` and `--model` may\nbe left out" in text
