"""results/paper/index.md and index.html: every figure with our headline number beside the paper's.

    write_index(out_dir, entries, about)   # -> (index.md, index.html)

An `Entry` is one figure: its PNGs (file names in `out_dir`), our `Headline` (or None) and what is
missing or failed for it; its verdict is yes, no, not testable (with the reason: the rule could not
have failed on this input) or - (nothing to judge), beside the rule that gave it. Nothing is dropped: a figure without a PNG or a headline is listed with the
reason, and a failed step shows in its figure's row and in the steps table. Each entry says who made
it (`Entry.made`: commits, date, time taken, the guard's verdict, run folders), so a reader can tell
whether its numbers still describe the code (`testbed paper --check`). `about` holds the run's
facts: command, commit, dirty, finished, wall_s, machine, scale, steps [{name, status, seconds, detail, ...}].
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from pathlib import Path

from analysis.headlines import AGREEMENT_RULES, PAPER, Claim, Headline


@dataclass
class Entry:
    figure: str
    images: list[str] = field(default_factory=list)
    headline: Headline | None = None
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # facts the verdict took into account (e.g. messages the
                                                     # saturation guard left out): listed, not a problem
    failed: list[str] = field(default_factory=list)
    source: str = ""
    scale: str = ""
    table: list[str] = field(default_factory=list)   # markdown table lines shown under the figure (e.g. side by side)
    claim: Claim | None = None                       # the paper's claim, when not in analysis.headlines.PAPER
    rule: str = ""                                   # (a system's benchmark brings both: testbed.plugin.Benchmark)
    depends: list[str] = field(default_factory=list)  # git pathspecs its numbers rest on (testbed paper --check)
    made: dict = field(default_factory=dict)         # who made it (testbed.paper_record.provenance): commits,
                                                     # uncommitted files, date, runs, guard, seconds, steps

    def record(self, out_dir: Path) -> dict:
        """The entry as results/paper/index.json holds it, for `testbed paper --check` and --resume."""
        return {"figure": self.figure, "status": self.status(out_dir), "problems": self.problems(out_dir),
                "ours": self.headline.ours if self.headline else None, "verdict": _agrees(self.headline),
                "scale": _scale(self), "source": self.source, "depends": self.depends, **self.made}

    def status(self, out_dir: Path) -> str:
        if self.failed:
            return "failed"
        if self.headline is None or self.missing or not self.present(out_dir):
            return "missing"
        return "ok"

    def present(self, out_dir: Path) -> list[str]:
        return [name for name in self.images if (Path(out_dir) / name).exists()]

    def problems(self, out_dir: Path) -> list[str]:
        """Everything missing or failed, in words (also a listed PNG that is not there)."""
        absent = [f"{name} not rendered" for name in self.images if not (Path(out_dir) / name).exists()]
        none = ["no headline number"] if self.headline is None and not self.missing and not self.failed else []
        return ([f"failed: {f}" for f in self.failed] + [f"missing: {m}" for m in self.missing + absent + none]
                + [f"note: {n}" for n in self.notes])


def figure_label(figure: str) -> str:
    return "Fig. " + figure.removeprefix("fig") if figure.startswith("fig") else figure


def _agrees(headline: Headline | None) -> str:
    """yes | no | not testable | - (see `Headline.verdict`)."""
    return "-" if headline is None else headline.verdict


def _why(headline: Headline | None) -> str:
    return headline.untestable if headline is not None else ""


def _scale(entry: Entry) -> str:
    return entry.headline.scale if entry.headline and entry.headline.scale else entry.scale


def _rows(entries: list[Entry], out_dir: Path) -> list[dict]:
    rows = []
    for e in entries:
        claim = e.claim or PAPER.get(e.figure)
        problems = e.problems(out_dir)
        rows.append({
            "figure": figure_label(e.figure), "anchor": e.figure, "title": claim.title if claim else e.figure,
            "ours": e.headline.ours if e.headline else "; ".join(problems) or "-",
            "paper": claim.text if claim else "-", "section": claim.section if claim else "-",
            "agrees": _agrees(e.headline), "why": _why(e.headline), "rule": e.rule or AGREEMENT_RULES.get(e.figure, ""),
            "scale": _scale(e),
            "status": e.status(out_dir), "problems": problems, "images": e.present(out_dir), "source": e.source,
            "table": e.table, **_made(e.made)})
    return rows


def _made(made: dict) -> dict:
    """Who made an entry, in words: its commits (short; "unknown" when its data names none; "+ uncommitted"
    when it ran with uncommitted changes), date, time taken, guard verdict and run folders."""
    commits = ", ".join(c[:7] if c else "unknown" for c in made.get("commits") or []) or "-"
    if made.get("dirty"):
        commits += f" + {len(made['dirty'])} uncommitted"
    seconds = made.get("seconds") or 0
    took = f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
    return {"commit": commits, "date": made.get("date") or "-", "took": took if made.get("steps") else "-",
            "guard": made.get("guard") or "-", "runs": made.get("runs") or []}


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(entries: list[Entry], out_dir: Path, about: dict) -> str:
    rows = _rows(entries, out_dir)
    lines = ["# ePulsar reproduction: every figure beside the paper", "",
             f"Generated {about.get('finished') or time.strftime('%Y-%m-%d %H:%M:%S')} by `{about.get('command', '')}` "
             f"in {about.get('wall_s', 0) / 60:.1f} min on {about.get('machine', '?')}.", "",
             f"**Scale.** {about.get('scale', '')}", "",
             f"**Code.** {_code(about)}", "",
             "## Headline numbers", "",
             "| figure | ours | paper | § | agrees | scale | status |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| [{r['figure']}](#{r['anchor']}) | {_md_cell(r['ours'])} | {_md_cell(r['paper'])} | "
                     f"{r['section']} | {r['agrees']} | {_md_cell(r['scale'])} | {r['status']} |")
    problems = [(r["figure"], p) for r in rows for p in r["problems"]]
    lines += ["", "## Missing, failed, and notes", ""]
    lines += [f"- {fig}: {p}" for fig, p in problems] or ["- nothing: every figure has its PNG and headline"]
    lines += ["", "## Who made each entry", "", "| entry | status | made at | date | took | guard | runs |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| [{r['figure']}](#{r['anchor']}) | {r['status']} | {r['commit']} | {r['date']} | {r['took']} | "
              f"{_md_cell(r['guard'])} | {_md_cell(', '.join(r['runs']) or '-')} |" for r in rows]
    steps = about.get("steps") or []
    if steps:
        lines += ["", "## Steps", "", "| # | step | status | time | detail |", "|---|---|---|---|---|"]
        for i, s in enumerate(steps, 1):
            lines.append(f"| {i} | {_md_cell(s['name'])} | {s['status']} | {s.get('seconds', 0):.0f} s | "
                         f"{_md_cell(s.get('detail', ''))} |")
    for r in rows:
        lines += ["", f'<a id="{r["anchor"]}"></a>', f"## {r['figure']}: {r['title']}", ""]
        lines += [f"![{name}]({name})" for name in r["images"]] or ["*(no PNG)*"]
        lines += ["", *r["table"]] if r["table"] else []
        lines += ["", f"- **ours:** {r['ours']}", f"- **paper (§{r['section']}):** {r['paper']}",
                  f"- **agrees:** {r['agrees']}" + (f": {r['why']}" if r["why"] else "")
                  + (f" (rule: {r['rule']})" if r["rule"] else ""),
                  f"- **scale:** {r['scale'] or '-'}", f"- **source:** {r['source'] or '-'}",
                  f"- **made at:** {r['commit']} ({r['date']}, took {r['took']}); guard: {r['guard']}"]
        lines += [f"- **{p.split(':', 1)[0]}:**{p.split(':', 1)[1]}" for p in r["problems"]]
    return "\n".join(lines) + "\n"


def _code(about: dict) -> str:
    """The commit the index was written at, and how to ask whether its entries still describe the code."""
    commit = (about.get("commit") or "unknown")[:7]
    dirty = f" with {len(about['dirty'])} uncommitted file(s)" if about.get("dirty") else ""
    return (f"written at commit {commit}{dirty}; each entry below names the commit its numbers were made at. "
            f"`testbed paper --check` says which entries the code checked out beside them has changed under.")


def _h(text) -> str:
    return html.escape(str(text))


def html_page(entries: list[Entry], out_dir: Path, about: dict) -> str:
    rows = _rows(entries, out_dir)
    colour = {"ok": "#1a7f37", "missing": "#9a6700", "failed": "#cf222e"}
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>ePulsar reproduction: figures</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:4px 6px;"
             "vertical-align:top}img{max-width:100%;border:1px solid #eee;margin:0.5em 0}</style></head><body>",
             "<h1>ePulsar reproduction: every figure beside the paper</h1>",
             f"<p>Generated {_h(about.get('finished', ''))} by <code>{_h(about.get('command', ''))}</code> in "
             f"{about.get('wall_s', 0) / 60:.1f} min on {_h(about.get('machine', '?'))}.</p>",
             f"<p><b>Scale.</b> {_h(about.get('scale', ''))}</p>", f"<p><b>Code.</b> {_h(_code(about))}</p>",
             "<h2>Headline numbers</h2><table><tr><th>figure</th><th>ours</th><th>paper</th><th>§</th>"
             "<th>agrees</th><th>scale</th><th>status</th></tr>"]
    for r in rows:
        parts.append(f"<tr><td><a href='#{r['anchor']}'>{_h(r['figure'])}</a></td><td>{_h(r['ours'])}</td>"
                     f"<td>{_h(r['paper'])}</td><td>{_h(r['section'])}</td><td>{_h(r['agrees'])}</td>"
                     f"<td>{_h(r['scale'])}</td><td style='color:{colour.get(r['status'], '#000')}'>"
                     f"{_h(r['status'])}</td></tr>")
    parts.append("</table><h2>Missing, failed, and notes</h2><ul>")
    problems = [(r["figure"], p) for r in rows for p in r["problems"]]
    parts += [f"<li>{_h(fig)}: {_h(p)}</li>" for fig, p in problems] or [
        "<li>nothing: every figure has its PNG and headline</li>"]
    parts.append("</ul><h2>Who made each entry</h2><table><tr><th>entry</th><th>status</th><th>made at</th>"
                 "<th>date</th><th>took</th><th>guard</th><th>runs</th></tr>")
    parts += [f"<tr><td><a href='#{r['anchor']}'>{_h(r['figure'])}</a></td><td style='color:"
              f"{colour.get(r['status'], '#000')}'>{_h(r['status'])}</td><td>{_h(r['commit'])}</td><td>{_h(r['date'])}</td>"
              f"<td>{_h(r['took'])}</td><td>{_h(r['guard'])}</td><td>{_h(', '.join(r['runs']) or '-')}</td></tr>"
              for r in rows]
    parts.append("</table>")
    steps = about.get("steps") or []
    if steps:
        parts.append("<h2>Steps</h2><table><tr><th>#</th><th>step</th><th>status</th><th>time</th><th>detail</th></tr>")
        for i, s in enumerate(steps, 1):
            parts.append(f"<tr><td>{i}</td><td>{_h(s['name'])}</td><td style='color:{colour.get(s['status'], '#000')}'>"
                         f"{_h(s['status'])}</td><td>{s.get('seconds', 0):.0f} s</td><td>{_h(s.get('detail', ''))}</td></tr>")
        parts.append("</table>")
    for r in rows:
        parts.append(f"<h2 id='{r['anchor']}'>{_h(r['figure'])}: {_h(r['title'])}</h2>")
        parts += [f"<img src='{_h(name)}' alt='{_h(name)}'>" for name in r["images"]] or ["<p><i>(no PNG)</i></p>"]
        if r["table"]:
            cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in r["table"] if "---" not in line]
            parts.append("<table>" + "".join("<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{_h(c)}</{'th' if i == 0 else 'td'}>"
                                                                for c in row) + "</tr>" for i, row in enumerate(cells)) + "</table>")
        rule = (f": {_h(r['why'])}" if r["why"] else "") + (f" (rule: {_h(r['rule'])})" if r["rule"] else "")
        parts.append(f"<ul><li><b>ours:</b> {_h(r['ours'])}</li><li><b>paper (§{_h(r['section'])}):</b> "
                     f"{_h(r['paper'])}</li><li><b>agrees:</b> {_h(r['agrees'])}{rule}</li>"
                     f"<li><b>scale:</b> {_h(r['scale'] or '-')}</li><li><b>source:</b> {_h(r['source'] or '-')}</li>"
                     f"<li><b>made at:</b> {_h(r['commit'])} ({_h(r['date'])}, took {_h(r['took'])}); guard: "
                     f"{_h(r['guard'])}</li>"
                     + "".join(f"<li style='color:#cf222e'>{_h(p)}</li>" for p in r["problems"]) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_index(out_dir, entries: list[Entry], about: dict) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, page = out_dir / "index.md", out_dir / "index.html"
    md.write_text(markdown(entries, out_dir, about))
    page.write_text(html_page(entries, out_dir, about))
    return md, page


__all__ = ["Entry", "write_index", "markdown", "html_page", "figure_label"]
