"""How fast the HTML report is on a profile of 100,000 nodes, in Debian's headless Chromium.

    python3 bench/html_report.py [--nodes 100000] [--loads 3] [--rounds 3] [--budget-ms 1000]

Renders tests/unit/views/synth.py's big_profile (GPU time, CPU samples, calls, API time) into one report and
opens it offline --loads times: the time to the first flame graph (window.deepctx.timings.flame, page time).
Then, in fresh pages (--rounds of them), the time from each interaction to the second painted frame:

- click a frame, search, clear the search;
- switch to bottom-up on the metric the report opened on (GPU time: the profile has it);
- switch the metric while bottom-up (the bottom-up tree is rebuilt for CPU samples, the heaviest metric:
  most nodes hold samples);
- back to top-down, then switch the metric in top-down;
- the Functions tab (the flat view walks the whole tree).

Prints one JSON object (each interaction's times in every round, and its worst) and exits 1 when any
interaction's worst time, or the best first flame graph, is over --budget-ms (DESIGN: 1 s each).
tests/views/test_html_browser.py checks what the same page does, not how fast.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests" / "views"), str(HERE.parent / "tests" / "unit" / "views")]

from conftest import CHROMIUM_ARGS, chromium_path  # noqa: E402
from synth import big_profile  # noqa: E402
from test_html_browser import REACT_JS, open_report  # noqa: E402

from deepctx.cli.formats.html import HtmlReport  # noqa: E402

# (label, REACT_JS argument, the page's state to check afterwards: body dataset key and value)
STEPS: list[tuple[str, list[Any], tuple[str, str] | None]] = [
    ("click a frame", ["click", 40], None),
    ("search", ["search", "fn_12"], None),
    ("clear the search", ["search", ""], ("searchMatches", "0")),
    ("bottom-up", ["select", ["view", "bottom-up"]], ("view", "bottom-up")),
    ("metric, bottom-up", ["select", ["metric", "cpu_samples"]], ("metric", "cpu_samples")),
    ("top-down", ["select", ["view", "top-down"]], ("view", "top-down")),
    ("metric, top-down", ["select", ["metric", "gpu_time_ns"]], ("metric", "gpu_time_ns")),
    ("functions tab", ["tab", "flat"], ("tab", "flat")),
]

TAB_JS = """async (name) => {
  const t = performance.now();
  document.getElementById('tab-' + name).click();
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t;
}"""


def interact(page: Any, arg: list[Any], expect: tuple[str, str] | None) -> float:
    ms = page.evaluate(TAB_JS, arg[1]) if arg[0] == "tab" else page.evaluate(REACT_JS, arg)
    if arg[0] == "click" and not page.evaluate("() => document.body.dataset.zoomed"):
        raise SystemExit("a click on a frame did not zoom into it")
    if expect is not None:
        key, value = expect
        got = page.evaluate(f"() => document.body.dataset.{key}")
        if got != value:
            raise SystemExit(f"after {arg}: body.dataset.{key} is {got!r}, not {value!r}")
    return float(ms)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-ms", type=float, default=1000.0)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="deepctx-html-"))
    try:
        path = folder / "big.html"
        path.write_text(HtmlReport().render(big_profile(args.nodes)))
        size_mb = round(path.stat().st_size / 2**20, 1)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
            flame: list[float] = []
            for _ in range(args.loads):
                page, _ = open_report(browser, path)
                flame.append(page.evaluate("window.deepctx.timings")["flame"])
                page.context.close()
            react: dict[str, list[float]] = {label: [] for label, _, _ in STEPS}
            opened_on = ""
            for _ in range(args.rounds):
                page, requests = open_report(browser, path)
                opened_on = page.eval_on_selector("#metric", "s => s.value")
                for label, arg, expect in STEPS:
                    react[label].append(interact(page, arg, expect))
                assert requests == []
                page.context.close()
            browser.close()
    finally:
        shutil.rmtree(folder)
    worst = {k: round(max(v)) for k, v in react.items()}
    over = [k for k, v in worst.items() if v > args.budget_ms]
    if min(flame) > args.budget_ms:
        over.append("first flame graph")
    print(json.dumps({"nodes": args.nodes, "report_mb": size_mb, "opened_on": opened_on,
                      "first_flame_ms": [round(x) for x in flame],
                      "react_ms": {k: [round(x) for x in v] for k, v in react.items()},
                      "worst_ms": worst, "budget_ms": args.budget_ms, "over_budget": over}))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
