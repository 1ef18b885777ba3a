"""``fore bench --html``: the report page renders in a real browser.

A short real run writes the page (and the figure), then headless Chromium
(Debian's ``chromium`` package, installed by ``.ci/run``) loads it from disk
with networking off: its DOM must hold the verdict line the run printed, and
its screenshot must be a real picture (not a blank page). Every browser call
is bounded by a timeout; nothing is timed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs Debian's chromium package")
        pytest.skip("needs chromium (apt-get install chromium)")
    return found


def browse(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_the_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    page, figure, data = (
        tmp_path / "fore.bench.html",
        tmp_path / "fore.bench.png",
        tmp_path / "r.json",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORE_")}
    done = subprocess.run(
        [
            sys.executable, "-m", "fore.supervision.cli", "bench", "--sessions", "4",
            "--turns", "3", "--think-ms", "400", "--no-progress", "--no-governor",
            "--html", str(page), "--plot", str(figure), "--json", str(data),
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    verdict = done.stdout.strip().splitlines()[-1]
    assert verdict.startswith("verdict")
    assert f"HTML report written to {page}" in done.stdout
    assert json.loads(data.read_text())["verdict"]  # the JSON has the same verdicts

    dom = browse(page, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="verdict"' in dom.stdout
    # the DOM has the very verdict the console printed (HTML-escaped alike)
    text = " ".join(dom.stdout.split())
    assert verdict.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in text
    assert "data:image/png;base64," in dom.stdout  # the figure, embedded

    shot = tmp_path / "shot.png"
    snap = browse(
        page, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,2000"
    )
    assert snap.returncode == 0, snap.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1280, 2000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    # A page with a table, a coloured verdict box and a plotted figure has many
    # colours and is far from blank; a page that failed to render is one colour.
    assert colours is None or len(colours) > 200
    if colours is not None:
        most = max(count for count, _ in colours)
        assert most < 0.95 * 1280 * 2000
