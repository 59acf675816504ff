"""How fast the HTML report is on a profile of 100,000 nodes, in Debian's headless Chromium.

    python3 bench/html_report.py [--nodes 100000] [--loads 3]

Renders tests/unit/views/synth.py's big_profile into one report, opens it offline --loads times and reports
the best time to the first flame graph (window.deepctx.timings.flame, page time), then the time from each
interaction (click a frame, search, switch to bottom-up, switch the metric) to the second painted frame.
The budget is 1 s for each. tests/views/test_html_browser.py checks the same page's behaviour, not its speed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests" / "views"), str(HERE.parent / "tests" / "unit" / "views")]

from conftest import CHROMIUM_ARGS, chromium_path  # noqa: E402
from synth import big_profile  # noqa: E402
from test_html_browser import REACT_JS, open_report  # noqa: E402

from deepctx.cli.formats.html import HtmlReport  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--loads", type=int, default=3)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    path = Path(tempfile.mkdtemp(prefix="deepctx-html-")) / "big.html"
    path.write_text(HtmlReport().render(big_profile(args.nodes)))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        flame = []
        for _ in range(args.loads):
            page, _ = open_report(browser, path)
            flame.append(page.evaluate("window.deepctx.timings")["flame"])
            page.context.close()
        page, _ = open_report(browser, path)
        react = {
            "click": page.evaluate(REACT_JS, ["click", 40]),
            "search": page.evaluate(REACT_JS, ["search", "fn_12"]),
            "bottom-up": page.evaluate(REACT_JS, ["select", ["view", "bottom-up"]]),
            "metric": page.evaluate(REACT_JS, ["select", ["metric", "gpu_time_ns"]]),
        }
        browser.close()
    print(json.dumps({"nodes": args.nodes, "report_mb": round(path.stat().st_size / 2**20, 1),
                      "first_flame_ms": [round(x) for x in flame], "react_ms": {k: round(v) for k, v in react.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
