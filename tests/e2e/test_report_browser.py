"""`lockstep report` as a user runs it, and its page in a real headless Chromium.

The report of a synthetic run (two roles scraped every 5 s, a slow middle with shed
requests) is rendered by Chromium: a probe script, added to a copy of the page only, measures
every SVG label against its chart's view box and every block of text against its box, at
the page's own 14 px font; the DOM it dumps must hold the labels whole and "≥ 10 s" for the
saturated e2e P99. A screenshot of the whole page is checked as an image and kept in
``tmp_path`` (docs/img/report.png is one).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from lockstep.telemetry.metrics import Telemetry
from tests.clirun import lockstep as _cli
from tests.reportscenario import write_files

pytestmark = pytest.mark.e2e

WIDTH = 1280
#: Flags that keep a headless Chromium from reaching the (closed) network or hanging.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")
PROBE = """<script>
(() => {
  const problems = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1)
    problems.push(`page wider than the window: ${root.scrollWidth} > ${root.clientWidth}`);
  for (const svg of document.querySelectorAll("svg")) {
    const vb = svg.viewBox.baseVal;
    const name = svg.dataset.stage || svg.dataset.series;
    const boxes = [];
    for (const t of svg.querySelectorAll("text")) {
      const b = t.getBBox();
      if (t.textContent.trim() && b.width < 1)
        problems.push(`label "${t.textContent}" has no width: is a font installed?`);
      if (b.x < vb.x - 0.5 || b.y < vb.y - 0.5 || b.x + b.width > vb.x + vb.width + 0.5
          || b.y + b.height > vb.y + vb.height + 0.5)
        problems.push(`clipped label "${t.textContent}" in ${name}: ` +
                      `${b.x.toFixed(1)},${b.y.toFixed(1)} ` +
                      `${b.width.toFixed(1)}x${b.height.toFixed(1)}`);
      for (const [o, other] of boxes)
        if (b.x < o.x + o.width - 0.5 && o.x < b.x + b.width - 0.5 &&
            b.y < o.y + o.height - 0.5 && o.y < b.y + b.height - 0.5)
          problems.push(`labels "${t.textContent}" and "${other}" overlap in ${name}`);
      boxes.push([b, t.textContent]);
    }
  }
  for (const el of document.querySelectorAll("td,th,p,figcaption,h1,h2,h3,figure"))
    if (el.scrollWidth > el.clientWidth + 1)
      problems.push(`${el.tagName} overflows: "${el.textContent.slice(0, 60)}"`);
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({
    problems, height: root.scrollHeight,
    font: getComputedStyle(document.body).fontSize,
    labels: [...document.querySelectorAll("svg text")].map(t => t.textContent),
    cells: [...document.querySelectorAll("td,th")].map(t => t.textContent)});
  document.body.appendChild(out);
})();
</script>"""


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Chromium is not installed: scripts/test installs Debian's chromium "
                    "(apt-get install chromium)")
    return path


def _browse(tmp_path: Path, page: Path, *args: str) -> str:
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    result = subprocess.run([_chromium(), *FLAGS, f"--user-data-dir={profile}", *args,
                             page.resolve().as_uri()],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _probe(tmp_path: Path, report: Path) -> dict[str, Any]:
    probed = tmp_path / "probed.html"
    probed.write_text(report.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"),
                      encoding="utf-8")
    dom = _browse(tmp_path, probed, "--dump-dom", f"--window-size={WIDTH},900")
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result


def test_the_report_renders_in_chromium_with_whole_labels_and_saturated_p99s_as_at_least_10_s(
        tmp_path: Path) -> None:
    files = write_files(tmp_path)
    report = tmp_path / "report.html"
    result = _cli("report", *map(str, files), "-o", str(report))
    assert result.returncode == 0, result.stderr[-3000:]

    probe = _probe(tmp_path, report)
    assert probe["problems"] == []
    assert probe["font"] == "14px"
    labels, cells = probe["labels"], [c.strip() for c in probe["cells"]]
    assert "P99 ≥ 10 s" in labels  # the e2e distribution and its per-interval chart
    assert {"budget 12 ms", "budget 60 ms", "budget 120 ms", "budget 120.0 ms"} <= set(labels)
    assert {"e2e · cabin", "infer · cabin", "degraded · cabin"} <= set(labels)
    assert "≥ 10 s" in cells and not any("10000.00" in c for c in cells)
    assert {"vl", "text", "full", "text_only", "SchemaError", "DecodeError"} <= set(cells)
    assert not any(text.endswith(("…", "...")) for text in labels + cells)

    height = min(int(probe["height"]), 16_000)
    shot = tmp_path / "report.png"
    _browse(tmp_path, report, f"--screenshot={shot}", f"--window-size={WIDTH},{height}")
    assert shot.stat().st_size > 50_000
    with Image.open(shot) as image:
        assert image.size == (WIDTH, height) and height > 2000
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    assert (pixels != 255).any(axis=1).mean() > 0.03  # not a blank page
    colours = {tuple(c) for c in np.unique(pixels // 16, axis=0)}
    assert len(colours) > 40  # text, bars, lines and shading
    assert (0x5b // 16, 0x8f // 16, 0xf9 // 16) in colours  # the latency bars
    assert (0xdd // 16, 0x33 // 16, 0x33 // 16) in colours  # a P99 marker


def test_report_samples_live_urls_over_time_and_reads_its_scrape_log_back(
        tmp_path: Path) -> None:
    telemetry = Telemetry()
    port = telemetry.serve("127.0.0.1", 0)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            telemetry.stage("infer", 0.03, route="full", pool="vl", slo_class="cabin")
            telemetry.e2e(0.07, route="full", slo_class="cabin", budget_s=0.12)
            time.sleep(0.01)

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    try:
        log, live = tmp_path / "run.jsonl", tmp_path / "live.html"
        result = _cli("report", "--url", f"http://127.0.0.1:{port}/metrics", "--every",
                      "500ms", "--for", "2s", "--save", str(log), "-o", str(live))
    finally:
        stop.set()
        worker.join(timeout=5)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "scrape 5/5" in result.stderr and f"scrapes saved to {log}" in result.stderr
    assert len(log.read_text().splitlines()) == 5
    page = live.read_text()
    assert "5 scrapes from" in page and 'data-series="p99-infer"' in page
    again = tmp_path / "again.html"
    replay = _cli("report", str(log), "-o", str(again))
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert 'data-series="p99-e2e"' in again.read_text()


def test_report_refuses_saved_scrapes_without_a_time_among_scrapes_over_time(
        tmp_path: Path) -> None:
    timed = write_files(tmp_path, rounds=2)
    untimed = tmp_path / "plain.prom"
    untimed.write_text(timed[0].read_text().split("\n", 1)[1])
    result = _cli("report", str(timed[0]), str(timed[1]), str(untimed), "-o",
                  str(tmp_path / "r.html"))
    assert result.returncode == 2
    assert "carry no time" in result.stderr and "Traceback" not in result.stderr
