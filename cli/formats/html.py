"""The HTML report: one self-contained file (template, CSS, vendored d3 and d3-flame-graph, the app and
the data inlined), so it opens offline, from a mail attachment or a CI artifact."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

from deepctx.cli.formats.html_payload import diff_payload, profile_payload, read_sources
from deepctx.cli.views.diff import diff_tree
from deepctx.profiles.fold import VIEWS_DEFAULT, Fold
from deepctx.profiles.metrics import DEFAULT_SORT_ORDER
from deepctx.profiles.tree import from_doc, pick_metric

HTML_DIR = Path(__file__).resolve().parent.parent / "html"
# xz-compressed in the tree (a fifth of their size: the repository travels to the GPU host under 5 MB)
VENDOR = ("vendor/d3.min.js.xz", "vendor/d3-flamegraph.min.js.xz")


def _script_safe(text: str) -> str:
    """Text that cannot close the <script> element it sits in."""
    return text.replace("</", "<\\/")


def _json_for_script(data: Any) -> str:
    # '<' escaped as \u003c: JSON stays valid and no '</script>' or '<!--' can appear.
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class HtmlReport:
    def __init__(self, embed_sources: bool = True, fold: Fold = VIEWS_DEFAULT) -> None:
        self.embed_sources = embed_sources
        self.fold = fold  # the page opens so folded; its toggles change it (a diff's tree is fixed)

    def render(self, doc: dict[str, Any], metric: str | None = None, owner_uid: int | None = None) -> str:
        """owner_uid: the profiled process's owner, where known (whose rights root's sources are read with)."""
        root = from_doc(doc)  # as recorded: the page folds it, so its toggles can unfold it
        sources = read_sources(root, owner_uid) if self.embed_sources else {}
        return self._page(profile_payload(doc, root, pick_metric(root, metric), sources, self.fold))

    def render_diff(self, before: dict[str, Any], after: dict[str, Any], metric: str | None = None) -> str:
        root = diff_tree(from_doc(before, self.fold), from_doc(after, self.fold))
        if metric is None:
            metric = next((m for m in DEFAULT_SORT_ORDER if root.after_total.get(m) or root.before_total.get(m)),
                          "cpu_samples")
        return self._page(diff_payload(before, after, root, metric))

    def _page(self, payload: dict[str, Any]) -> str:
        template = (HTML_DIR / "report.html").read_text()
        vendor = "\n".join(lzma.decompress((HTML_DIR / v).read_bytes()).decode() for v in VENDOR)
        parts = {  # in the order the markers appear in report.html
            "@TITLE@": _html_escape(f"deepctx: {payload['title']}"[:200]),
            "/*@CSS@*/": (HTML_DIR / "report.css").read_text(),
            "@DATA@": _json_for_script(payload),
            "/*@VENDOR@*/": _script_safe(vendor),
            "/*@APP@*/": _script_safe((HTML_DIR / "app.js").read_text()),
        }
        out = []
        rest = template
        # One pass in template order, so text inserted for one marker is never searched for the next.
        for marker, text in parts.items():
            head, sep, rest = rest.partition(marker)
            if not sep:
                raise ValueError(f"report.html has no {marker}")
            out.extend([head, text])
        out.append(rest)
        return "".join(out)
