"""The HTML report in a real headless Chromium, offline: flame graph, zoom, search, source pane, findings,
timeline, diff, screenshots of each view, and a 100k-node profile that reacts within one second."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import recorded
from profile_paths import pc_sampled_with_source
from synth import big_profile, gpu_profile, trace_events

from deepctx.cli.formats.html import HtmlReport
from deepctx.profiles.fold import VIEWS_DEFAULT
from deepctx.profiles.tree import from_doc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "profiles"

FINDING = {"rule": "launch-bound-loop", "title": "1000 tiny kernels launched one at a time",
           "location": {"file": "", "line": 7, "function": "multiply"},
           "evidence": {"launches": 1000, "mean_gpu_time_ns": 2000}, "suggestion": "fuse the loop (torch.compile)",
           "estimated_speedup": 1.8, "confidence": 0.7}

# Time from an interaction to the next frame painted, in page time: d3-flame-graph updates synchronously.
REACT_JS = """async ([what, arg]) => {
  const t = performance.now();
  if (what === 'click') document.querySelectorAll('#flame g.frame')[arg].dispatchEvent(new MouseEvent('click', {bubbles: true}));
  if (what === 'search') { const s = document.getElementById('search'); s.value = arg; s.dispatchEvent(new Event('input')); }
  if (what === 'select') { const [id, v] = arg; const s = document.getElementById(id); s.value = v; s.dispatchEvent(new Event('change')); }
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t;
}"""


def open_report(browser: Any, path: Path) -> tuple[Any, list[str]]:
    """A page with the network cut off: every request that is not the report file itself is refused and noted."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, offline=True)
    page = context.new_page()
    requests: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r: Any) -> None:
        url = r.request.url
        if url == path.as_uri():
            r.continue_()
        else:
            requests.append(url)
            r.abort()

    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=30_000)
    assert errors == []
    return page, requests


def write(tmp_path: Path, name: str, html: str) -> Path:
    p = tmp_path / name
    p.write_text(html)
    return p


@pytest.fixture()
def report_page(browser: Any, tmp_path: Path, source_file: Path) -> Any:
    doc = gpu_profile(str(source_file))
    doc["findings"] = [dict(FINDING, location=dict(FINDING["location"], file=str(source_file)))]
    doc["trace"] = trace_events()
    page, requests = open_report(browser, write(tmp_path, "report.html", HtmlReport().render(doc, owner_uid=os.geteuid())))
    yield page
    assert requests == []  # nothing was fetched
    page.context.close()


def on_cpu_samples(page: Any) -> None:
    """The report opens a profile with GPU time on GPU time; these checks are of its CPU samples."""
    page.select_option("#metric", "cpu_samples")
    page.wait_for_function("() => document.body.dataset.metric === 'cpu_samples'")


def test_a_profile_with_gpu_time_opens_on_gpu_time(report_page: Any) -> None:
    page = report_page
    assert page.eval_on_selector("#metric", "s => s.value") == "gpu_time_ns"
    names = page.eval_on_selector_all("#flame g.frame", "els => els.map(e => e.getAttribute('name'))")
    assert sorted(names) == sorted(["python train.py", "[thread] python3", "<module>", "main", "main", "multiply",
                                    "read_scalars", "cudaLaunchKernel", "cudaMemcpyAsync",
                                    "vectorized_elementwise_kernel", "DtoH"])


def test_flame_graph_renders_and_click_zooms(report_page: Any, shots: Any) -> None:
    page = report_page
    on_cpu_samples(page)
    names = page.eval_on_selector_all("#flame g.frame", "els => els.map(e => e.getAttribute('name'))")
    assert sorted(names) == sorted(["python train.py", "[thread] python3", "<module>", "main", "multiply",
                                    "at::native::mul_kernel_cuda", "PyObject_Malloc"])
    shots(page, "flame-top-down")
    width_before = page.eval_on_selector("#flame g.frame[name='multiply'] rect", "r => +r.getAttribute('width')")
    page.locator("#flame g.frame[name='multiply']").click()
    page.wait_for_function("() => document.body.dataset.zoomed === 'multiply'")
    svg_width = page.eval_on_selector("#flame svg", "s => +s.getAttribute('width')")
    page.wait_for_function("(w) => +document.querySelector(\"#flame g.frame[name='multiply'] rect\").getAttribute('width') > w",
                           arg=0.99 * svg_width)
    assert width_before < 0.9 * svg_width  # it really grew to the full width
    shots(page, "flame-zoomed")


def test_click_shows_the_source_line(report_page: Any, shots: Any) -> None:
    page = report_page
    on_cpu_samples(page)
    page.locator("#flame g.frame[name='multiply']").click()
    page.wait_for_function("() => document.body.dataset.tab === 'source'")
    line = page.locator("#source .line.hl")
    assert line.count() == 1 and line.get_attribute("data-line") == "7"
    assert "y = x * 2  # hot line 7" in line.inner_text()
    # Per-line metric: line 7 holds the 12 CPU samples of multiply's callee (total), none of its own.
    cells = line.locator(".m").all_inner_texts()
    assert cells == ["", "12"]
    shots(page, "source")


def test_search_highlights_matches(report_page: Any, shots: Any) -> None:
    page = report_page
    highlighted_js = ("els => els.filter(e => e.querySelector('rect').getAttribute('fill') === '#e600e6')"
                      ".map(e => e.getAttribute('name'))")
    on_cpu_samples(page)
    page.fill("#search", "_KERNEL")  # case-insensitive; not cudaLaunchKernel
    page.wait_for_function("() => document.body.dataset.searchMatches === '2'")
    assert page.eval_on_selector_all("#flame g.frame", highlighted_js) == ["at::native::mul_kernel_cuda"]
    assert "search: 2 frames, 12 of 47 (25.5%)" in page.inner_text("#details")
    shots(page, "search")
    page.select_option("#metric", "calls")  # the kernel is drawn now, and stays highlighted
    page.wait_for_function("() => document.body.dataset.metric === 'calls'")
    assert page.eval_on_selector_all("#flame g.frame", highlighted_js) == ["vectorized_elementwise_kernel"]


def test_bottom_up_and_metric_switch(report_page: Any, shots: Any) -> None:
    page = report_page
    page.select_option("#metric", "calls")
    page.select_option("#view", "bottom-up")
    page.wait_for_function("() => document.body.dataset.view === 'bottom-up' && document.body.dataset.metric === 'calls'")
    tops = page.eval_on_selector_all("#flame g.frame", "els => els.map(e => e.__data__).filter(d => d.depth === 1).map(d => [d.data.name, d.value])")
    assert sorted(tops) == [["DtoH", 50], ["stream", 50], ["vectorized_elementwise_kernel", 1000]]
    shots(page, "flame-bottom-up")


def test_tables_findings_and_timeline(report_page: Any, shots: Any) -> None:
    page = report_page
    on_cpu_samples(page)
    rows = page.locator("#tree tbody tr")
    assert rows.count() >= 5
    shots(page, "tree")
    page.click("#tab-flat")
    first = page.locator("#flat tbody tr").first.inner_text()
    assert first.startswith("main") and "30" in first
    shots(page, "functions")
    page.click("#tab-findings")
    assert "1000 tiny kernels launched one at a time" in page.inner_text("#findings")
    shots(page, "findings")
    page.click("#findings .loc")
    page.wait_for_function("() => document.body.dataset.tab === 'source'")
    assert page.locator("#source .line.hl").get_attribute("data-line") == "7"
    page.click("#tab-timeline")
    page.wait_for_function("() => document.body.dataset.timeline === '2'")  # thread 4242, GPU 0 stream 7
    assert "12 events" in page.inner_text("#timeline-info")
    shots(page, "timeline")


def test_diff_report(browser: Any, tmp_path: Path, source_file: Path, shots: Any) -> None:
    before = gpu_profile(str(source_file))
    after = gpu_profile(str(source_file), mul_calls=1500, extra_kernel=True)
    page, requests = open_report(browser, write(tmp_path, "diff.html", HtmlReport().render_diff(before, after)))
    assert page.locator("body").get_attribute("data-tab") == "changes"
    text = page.inner_text("#changes")
    assert "fused_gelu_kernel" in text and "appeared" in text and "grew" in text
    shots(page, "diff")
    assert requests == []
    page.context.close()


def test_hundred_thousand_nodes_load_and_react(browser: Any, tmp_path: Path, shots: Any) -> None:
    """The page works on 100k nodes: every node loaded (folded as the views fold), the flame graph drawn without the sub-pixel frames,
    each interaction applied. How fast is bench/html_report.py's (BENCHMARKS.md), not this test's."""
    doc = big_profile(100_000)
    path = write(tmp_path, "big.html", HtmlReport().render(doc))
    page, requests = open_report(browser, path)
    # the page folds start-up and plumbing frames as profiles/tree.py does: the same number of nodes
    folded = sum(1 for _ in from_doc(doc, VIEWS_DEFAULT).walk())
    assert page.evaluate("window.deepctx.nodes") == folded == 99_664
    shown = page.locator("#flame g.frame").count()
    assert 100 < shown < 5000  # frames narrower than 2 px are not drawn
    page.evaluate(REACT_JS, ["click", 40])
    page.evaluate(REACT_JS, ["search", "fn_12"])
    assert int(page.evaluate("document.body.dataset.searchMatches")) > 0
    page.evaluate(REACT_JS, ["select", ["view", "bottom-up"]])
    page.evaluate(REACT_JS, ["select", ["metric", "gpu_time_ns"]])
    assert page.evaluate("[document.body.dataset.view, document.body.dataset.metric]") == ["bottom-up", "gpu_time_ns"]
    shots(page, "big-100k")
    assert requests == []
    page.context.close()


def test_fold_toggles_rebuild_the_tree(browser: Any, tmp_path: Path, shots: Any) -> None:
    """The page opens with start-up and plumbing frames folded (the node counts of profiles/tree.py's fold,
    tests/unit/views/test_fold.py) and each toggle rebuilds it from the recorded tree."""
    from test_fold import split_profile

    page, requests = open_report(browser, write(tmp_path, "fold.html", HtmlReport(embed_sources=False).render(
        split_profile())))

    def state() -> tuple[int, list[str], str]:
        on_cpu_samples(page)  # the page opens on GPU time, which only the Python path has
        names = page.eval_on_selector_all("#flame g.frame", "els => els.map(e => e.getAttribute('name'))")
        return page.evaluate("window.deepctx.nodes"), sorted(names), page.evaluate("document.body.dataset.fold")

    nodes, names, fold = state()
    assert (nodes, fold) == (12, "startup plumbing dispatch")
    assert names.count("<module>") == 1 and "Module._call_impl" not in names and "Py_RunMain" not in names
    assert "Py_FinalizeEx" in names and "_start" in names  # start-up with no Python below stays
    shots(page, "folded")
    for box, expected in (("#show-plumbing", (14, "startup dispatch")), ("#show-startup", (28, "dispatch"))):
        with page.expect_navigation():
            page.check(box)
        page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=30_000)
        nodes, names, fold = state()
        assert (nodes, fold) == expected
    assert names.count("<module>") == 3 and names.count("Module._call_impl") == 3 and "Py_RunMain" in names
    assert page.is_checked("#show-startup") and page.is_checked("#show-plumbing")
    assert requests == []
    page.context.close()


def test_the_dispatch_toggle_shows_the_native_frames_around_operators(browser: Any, tmp_path: Path, shots: Any) -> None:
    """The operator miniature's capture (tests/fixtures/profiles/ops_miniature.json.xz): folded, each line's
    launches sit under their aten:: operators; the toggle brings the dispatcher's native frames back."""
    doc = recorded.read(FIXTURES / "ops_miniature.json.xz")
    page, requests = open_report(browser, write(tmp_path, "ops.html", HtmlReport(embed_sources=False).render(doc)))

    def names() -> list[str]:
        return page.eval_on_selector_all("#flame g.frame", "els => els.map(e => e.getAttribute('name'))")

    folded = names()
    assert {"aten::matmul", "aten::mm", "aten::mul.Tensor", "aten::addmm"} <= set(folded)
    assert "at::_ops::mm::call(long)" not in folded and "at::native::mm_cuda(long)" not in folded
    with page.expect_navigation():
        page.check("#show-dispatch")
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=30_000)
    shown = names()
    assert {"aten::mm", "at::_ops::mm::call(long)", "at::native::mm_cuda(long)"} <= set(shown)
    assert page.evaluate("document.body.dataset.fold") == "startup plumbing"
    shots(page, "dispatch-shown")
    assert requests == []
    page.context.close()


def test_a_sampled_instruction_shows_its_cuda_line(browser: Any, tmp_path: Path, shots: Any) -> None:
    """PC sampling: clicking a kernel's SASS instruction opens the CUDA source at its line, with the line's
    PC samples (the constructed profile, its lines pointed at a copy of the fixture's source)."""
    doc, cu = pc_sampled_with_source(tmp_path)
    page, requests = open_report(browser, write(tmp_path, "pcs.html", HtmlReport().render(doc, owner_uid=os.geteuid())))
    page.select_option("#metric", "pc_samples")
    page.wait_for_function("() => document.body.dataset.metric === 'pc_samples'")
    # dispatched on the frame itself: a pointer click during the metric switch's transition can land on the
    # frame passing under that point (seen once under a loaded CI run)
    page.locator("#flame g.frame[name='0x0250  STG.E desc[UR4][R4.64], R3']").dispatch_event("click")
    page.wait_for_function("() => document.body.dataset.tab === 'source'")
    line = page.locator("#source .line.hl")
    assert line.count() == 1 and line.get_attribute("data-line") == "6"
    assert "out[i] = in[(i * stride) % n];  // LINE_LOAD" in line.inner_text()
    assert line.locator(".m").all_inner_texts() == ["", "39"]  # strided_copy's samples, all at line 6
    shots(page, "source-pcs")
    assert requests == []
    page.context.close()


def test_compiled_kernels_and_compiles(browser: Any, tmp_path: Path, source_file: Path, shots: Any) -> None:
    """torch.compile's facts in the page: each compiled kernel's model lines beside it in the tree, and the
    Compiles tab with each recompile's cause and graph break."""
    doc = gpu_profile(str(source_file))
    kernels = [n for n in _nodes(doc["root"]) if n["kind"] == "kernel"]
    kernels[0]["compiled_from"] = {"lines": [{"file": "/srv/model.py", "line": 41, "function": "forward", "code": None},
                                             {"file": "/srv/model.py", "line": 42, "function": "forward", "code": None}],
                                   "nodes": ["x"], "aten": ["aten.relu"], "compile_id": "0/0", "output_code": "/tmp/c.py",
                                   "framework": "inductor"}
    doc["compiles"] = [{"id": "0/1", "function": "forward", "file": "/srv/model.py", "line": 40,
                        "recompile_reason": "0/0: tensor 'x' size mismatch at index 0. expected 64, actual 96",
                        "fail_reason": None, "time_s": 2.5, "ops": 7, "start_unix": None,
                        "graph_breaks": [{"file": "/srv/model.py", "line": 44, "reason": "print"}],
                        "called_from": {"file": "/srv/train.py", "line": 25, "function": "train", "code": None}}]
    page, requests = open_report(browser, write(tmp_path, "compiled.html", HtmlReport().render(doc, owner_uid=os.geteuid())))
    try:
        page.select_option("#metric", "calls")
        page.wait_for_function("() => document.body.dataset.metric === 'calls'")
        assert "from model.py:41, 42" in page.inner_text("#tree")
        page.click("#tab-compiles")
        text = page.inner_text("#compiles")
        assert "0/1 forward (model.py:40)" in text and "called at train.py:25" in text
        assert "recompiled: 0/0: tensor 'x' size mismatch at index 0" in text and "graph break at model.py:44: print" in text
        shots(page, "compiles")
        assert requests == []
    finally:
        page.context.close()


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n["children"])
    return out
