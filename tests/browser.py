"""Headless Chromium for the view's tests: Debian's chromium and chromium-driver (`make browser`),
driven by Selenium, and the checks a person would make of the page, read from what it draws."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.procs import json_lines
from testbed.view import browser as view_browser

ROOT = Path(__file__).resolve().parent.parent
NEEDS_BROWSER = pytest.mark.skipif(not view_browser.available(), reason=view_browser.MISSING)
ADDRESS = re.compile(r"(http://127\.0\.0\.1:\d+/)")


@contextlib.contextmanager
def chromium(profile: Path):
    driver = view_browser.open_browser(profile)
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(driver, script: str, timeout: float = 30.0):
    """The value of `script` (JavaScript returning something truthy once the page shows it)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.25).until(lambda d: d.execute_script(script))


@contextlib.contextmanager
def replay(run_dir: Path):
    """`testbed view RUN_DIR --port 0` as a user types it; yields the page's address."""
    process = subprocess.Popen([sys.executable, "-m", "testbed.cli", "view", str(run_dir), "--port", "0"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = process.stdout.readline()
        found = ADDRESS.search(line)
        assert found, f"no address in {line!r}"
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(timeout=10)


# What the page shows, read from its tables and from the figures Plotly drew.
SHOWN = """
const fig = id => document.getElementById(id);
const topo = fig('topology'), lat = fig('latency');
const traces = topo && topo.data ? topo.data : [];
const clients = traces.length ? traces[traces.length - 1] : {ids: [], x: [], y: []};
const cells = {};
document.querySelectorAll('#summary tbody tr').forEach(row => {
  cells[row.dataset.class] = {};
  row.querySelectorAll('td[data-field]').forEach(td => { cells[row.dataset.class][td.dataset.field] = td.textContent; });
});
return {
  drawn: window.tbView.drawn, ended: window.tbView.ended, shown: window.tbView.shown,
  status: fig('run-status').textContent, guard: fig('guard-status').textContent,
  problems: fig('problems').innerText,
  sites: traces.length > 3 ? traces[3].text : [], clients: clients.ids, x: clients.x, y: clients.y,
  series: (lat.data || []).filter(t => t.mode === 'lines').map(t => [t.name, t.x.length]),
  markTraces: (lat.data || []).filter(t => t.mode === 'markers').map(t => [t.name, t.x.length]),
  migrationSpans: ((lat.layout || {}).shapes || []).filter(s => s.name === 'migration').length,
  owners: document.querySelectorAll('#owners tbody tr').length,
  cells, deliveries: +fig('count-deliveries').textContent, migrations: +fig('count-migrations').textContent,
  violations: +fig('count-violations').textContent, recorded: fig('recorded').textContent,
};
"""


def shown(driver) -> dict:
    return driver.execute_script(SHOWN)


def show_time(driver, seconds: float) -> dict:
    """Drag the slider to `seconds` (as a person would: following the run stops) and read the page."""
    driver.execute_script("const s = document.getElementById('slider'); s.value = arguments[0];"
                          "s.dispatchEvent(new Event('input'));", seconds)
    wait_until(driver, f"return Math.abs(window.tbView.shown - {seconds}) < 0.11 || "
                       f"window.tbView.shown <= {seconds}", timeout=10)
    driver.execute_script("return new Promise(r => requestAnimationFrame(() => setTimeout(r, 900)))")
    return shown(driver)


def expected_cells(summary: dict) -> dict:
    """summary.json's classes as the page formats them (the end screen's precision)."""
    def ratio(v):
        return "-" if v is None else f"{100 * v:.2f} %"
    return {name: {"messages": str(c["messages"]), "p50_ms": f"{c['p50_ms']:.1f}", "p95_ms": f"{c['p95_ms']:.1f}",
                   "max_ms": f"{c['max_ms']:.1f}", "threshold_ms": "-" if c["threshold_ms"] is None
                   else f"{c['threshold_ms']:.0f}", "violation_ratio": ratio(c["violation_ratio"])}
            for name, c in summary["classes"].items()}


def check_finished_run(driver, out: Path, summary: dict, events: list[dict]) -> dict:
    """The page of a finished run shows its topology, its clients' moves, its migrations, a latency
    series per topic, and numbers equal to summary.json's; returns what it showed."""
    page = shown(driver)
    assert page["status"] == "finished", page
    sites = {e.get("to_site") for e in events if e["type"] == "relink"} | {e.get("from_site") for e in events
                                                                           if e["type"] == "relink"}
    assert sites - {None} <= {s.split(" · ")[0] for s in page["sites"]}, (sites, page["sites"])
    topics = {next(json_lines(path))["topic"] for path in (out / "traces").glob("*.jsonl") if path.stat().st_size}
    assert {name for name, points in page["series"] if points} == topics, page["series"]
    assert page["cells"] == expected_cells(summary), (page["cells"], summary["classes"])
    assert (page["migrations"], page["violations"]) == (summary["migrations"], summary["violations_detected"])
    assert page["deliveries"] == summary["delivered"]
    assert page["recorded"] == "equal to the run's summary.json"
    assert page["guard"].startswith(f"guard: {summary['harness']['validity']}"), page["guard"]  # the end screen's
    ends = [e for e in events if e["type"] == "migration_end"]
    assert page["migrationSpans"] == len(ends), page
    assert dict(page["markTraces"]).get("migrations", 0) == sum(bool(e.get("ok")) for e in ends), page
    return page


def check_moves(driver, events: list[dict]) -> None:
    """A client drawn at one site early in the run is drawn elsewhere after its first move."""
    t0 = next(e["time"] for e in events if e["type"] == "run_start")
    relinks = sorted((e for e in events if e["type"] == "relink"), key=lambda e: e["time"])
    assert relinks, "the run made no move"
    first = relinks[0]
    before, after = show_time(driver, 0.0), show_time(driver, round(first["time"] - t0 + 0.3, 1))
    i = before["clients"].index(first["node"])
    assert (before["x"][i], before["y"][i]) != (after["x"][i], after["y"][i]), (first, before, after)


# Pairs of things on the page that cover each other, read from the boxes Chromium laid out: per plot,
# an axis title and its tick labels, the legend and the x axis, the toolbar (modebar) and the plot
# area; on the map, any two labels (links, sites, clients).
OVERLAPS = """
const box = el => el.getBoundingClientRect();
const hit = (a, b) => a.width > 0 && a.height > 0 && b.width > 0 && b.height > 0 &&
  a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
const all = (div, sel) => [...div.querySelectorAll(sel)].filter(e => (e.textContent || "").trim() || !e.matches("text"));
const found = [];
const check = (id, what, as, bs) => as.forEach(a => bs.forEach(b => {
  if (a !== b && hit(box(a), box(b))) found.push(`${id}: ${what}: ${(a.textContent || a.getAttribute("class")).trim()}`
                                                + ` / ${(b.textContent || b.getAttribute("class")).trim()}`);
}));
for (const id of ["topology", "latency", "load", "guard"]) {
  const div = document.getElementById(id);
  const xt = all(div, ".g-xtitle text"), yt = all(div, ".g-ytitle text");
  const xticks = all(div, ".xaxislayer-above .xtick text"), yticks = all(div, ".yaxislayer-above .ytick text");
  const legend = all(div, ".legend .bg"), modebar = all(div, ".modebar"), area = all(div, ".draglayer .nsewdrag");
  check(id, "y title on tick labels", yt, yticks);
  check(id, "x title on tick labels", xt, xticks);
  check(id, "legend on the x axis", legend, [...xt, ...xticks]);
  check(id, "legend on the plot", legend, area);
  check(id, "toolbar on the plot", modebar, area);
}
const groups = [...document.querySelectorAll("#topology .scatterlayer .trace")];
const labels = groups.flatMap(g => all(g, ".textpoint text"));
labels.forEach((a, i) => check("topology", "labels", [a], labels.slice(i + 1)));
const points = groups.flatMap(g => [...g.querySelectorAll("path.point")]);
groups.filter(g => g.__data__[0].trace.name === "link delays").forEach(g => g.querySelectorAll(".textpoint").forEach(
  label => check("topology", "link label on a marker", all(label, "text"),
                 points.filter(p => !(g.contains(p) && p.__data__.i === label.__data__.i)))));  // not its own dot
return found;
"""


def overlaps(driver) -> list[str]:
    """What covers what on the page as drawn now (empty: nothing)."""
    return driver.execute_script(OVERLAPS)
