"""The load benchmark's HTML report (``fore bench --html PATH``): one self-contained page.

The verdict first (what a reader wants), then the figure, the targets, every
section of the table and the glossary -- the same content as the console
(:mod:`bench.report`), built from the same rows. One file, nothing fetched:
the CSS is inline and the figure is a base64 PNG, so the page can be mailed,
attached to a CI run or opened offline. Every text is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from fore.bench._common import Target, verdict_word
from fore.bench.load_report import Comparison, LoadReport
from fore.bench.report import GLOSSARY, sections, title_line, verdict_line

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
.params { color: #555; margin-top: 0; }
.verdict { font-size: 1.15em; padding: 0.6em 0.9em; border-radius: 6px; margin: 1em 0; }
.verdict.pass { background: #e3f5e9; border: 1px solid #7cc494; }
.verdict.fail { background: #fde8e8; border: 1px solid #e08a8a; }
.verdict.none { background: #f2f2f2; border: 1px solid #bbb; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; width: 100%; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #e4e4e4; vertical-align: top; }
th { text-align: left; background: #f6f6f6; }
table.report td:first-child { width: 55%; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.section td { font-weight: 600; background: #fafafa; padding-top: 0.8em; }
td.PASS { color: #137333; font-weight: 600; }
td.FAIL { color: #b3261e; font-weight: 600; }
.bad { color: #b3261e; font-weight: 600; }
img { max-width: 100%; border: 1px solid #ddd; }
dt { font-weight: 600; margin-top: 0.5em; }
dd { margin-left: 1.5em; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_html(
    report: LoadReport,
    targets: Sequence[Target],
    comparison: Comparison | None = None,
    reports: Sequence[LoadReport] | None = None,
    figure_png: bytes | None = None,
) -> str:
    """The page, as one string (UTF-8 when written)."""
    everything = list(reports or [report])
    interrupted = any(r.interrupted for r in everything)
    line = verdict_line(targets, interrupted=interrupted)
    judged = [t.passed for t in targets if t.passed is not None]
    kind = "fail" if False in judged else "pass" if judged else "none"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>fore bench: {_e(line.split(' — ')[0])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>fore bench{' — interrupted (partial report)' if interrupted else ''}</h1>",
        f'<p class="params">{_e(title_line(report, comparison))}</p>',
        f'<p class="verdict {kind}" id="verdict">{_e(line)}</p>',
    ]
    if figure_png is not None:
        data = base64.b64encode(figure_png).decode("ascii")
        parts.append(
            f'<p><img alt="latency CDFs and a timeline of the run" '
            f'src="data:image/png;base64,{data}"></p>'
        )
    else:
        parts.append("<p>— (no figure: matplotlib is not installed)</p>")
    parts.append("<h2>targets</h2><table><tr><th>target</th><th>limit</th>")
    parts.append("<th>measured</th><th>verdict</th></tr>")
    for t in targets:
        word = verdict_word(t)
        parts.append(
            f"<tr><td>{_e(t.name)}</td><td class='num'>{_e(t.limit_text)}</td>"
            f"<td class='num'>{_e(t.measured_text)}</td>"
            f"<td class='{_e(word.split()[0])}'>{_e(word)}</td></tr>"
        )
    parts.append(
        '</table><h2>report</h2><table class="report"><tr><th>measurement</th><th>value</th></tr>'
    )
    for section in sections(report, comparison):
        parts.append(f"<tr class='section'><td colspan='2'>{_e(section.title)}</td></tr>")
        for label, value in section.rows:
            css = " bad" if "DOES NOT CLOSE" in value else ""
            parts.append(
                f"<tr><td>{_e(label.strip())}</td><td class='num{css}'>{_e(value)}</td></tr>"
            )
    parts.append("</table>")
    if report.errors:
        parts.append("<h2>notes</h2><ul>")
        parts += [f"<li>{_e(note)}</li>" for note in report.errors[:20]]
        parts.append("</ul>")
    parts.append("<h2>glossary</h2><dl>")
    for term, meaning in GLOSSARY.items():
        parts.append(f"<dt>{_e(term)}</dt><dd>{_e(meaning)}</dd>")
    parts.append("</dl></body></html>")
    return "\n".join(parts) + "\n"
