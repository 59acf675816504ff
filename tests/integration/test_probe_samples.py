"""deepctx's own cost in the profile (daemon/probe_samples.py): CPU samples taken while the target's thread was
in a GPU API probe (the uprobe's trap and its BPF programs, or the return's trampoline) sit under a
`[deepctx probe]` frame below the probed call, counted in `cpu_samples_in_probes`, with a warning; the
analyzer leaves them out of the line's host time. On the real CUDA runtime, without a GPU: a tight
cudaLaunchKernel loop spends most of its time in the probes on this machine (BENCHMARKS.md: a probed call
costs 1.6 to 2.4 microseconds, the call itself 0.5)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from harness import StdinTarget, cuda_runtime, line_of, start_daemon, stop_daemon
from profile_paths import walk

from deepctx.host.gpu_apis import all_apis
from deepctx.profiles.analyzer import apis
from deepctx.profiles.analyzer.index import build_index
from deepctx.profiles.analyzer.rules.common import launch_api_ns, launch_cost

TARGET = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "launch_loop.py"
PROBE = "[deepctx probe]"
LOST = "[unwinding lost the callers]"
PROBED = {a.symbol for a in all_apis()}


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    d = start_daemon(tmp_path_factory.mktemp("probe-samples"))
    docs: dict[str, dict] = {}
    try:
        t = StdinTarget([sys.executable, str(TARGET), cuda_runtime()])
        docs["alone_ns"] = {"ns": float(t.first.split()[2])}  # an iteration before anything watched the loop
        try:
            # exact for 3 s: the launches' own code is 4% of the loop's samples, and the launch-cost test needs 20
            for name, seconds, args in (("exact", "3", ("--mode", "exact")), ("sampled", "1.5", ("--mode", "sampled")),
                                        ("cpu", "1.5", ("--no-gpu",))):
                docs[name] = d.attach_json(t.pid, "--duration", seconds, "--rate", "499", *args)
        finally:
            t.stop()
    finally:
        assert stop_daemon(d) == 0
    return docs


@pytest.mark.parametrize("mode", ["exact", "sampled"])
def test_samples_in_the_probes_are_marked_below_the_call(captures: dict[str, dict], mode: str) -> None:
    doc = captures[mode]
    line = line_of(TARGET, "LINE_LAUNCH")
    marked = [(anc, n) for anc, n in walk(doc) if n["name"] == PROBE]
    total = sum(n["metrics"]["cpu_samples"] for _, n in marked)
    loop = sum(n["metrics"]["cpu_samples"] for anc, n in walk(doc)
               if any(a["kind"] == "python" and a["line"] == line for a in [*anc, n]))
    lost = sum(n["metrics"]["cpu_samples"] for anc, n in marked if any(a["name"] == LOST for a in anc))
    by_parent = Counter(anc[-1]["name"] for anc, _ in marked)
    print(f"{mode}: {total} of the loop's {loop} samples in deepctx's probes, {lost} of them with their native "
          f"callers lost; nodes by the probed frame: {dict(by_parent)}")
    assert doc["stats"]["cpu_samples_in_probes"] == total
    # a sample in the trap before the kernel sets the ip back loses its native callers (daemon/probe_samples.py):
    # 3 to 6% of them on the development VM, 25 to 27% on an H100 (2026-12-06), the line kept by the Python walk
    assert lost < 0.5 * total, (lost, total)
    # the probes cost the loop more than its own call does (0.5 against 1.6 microseconds or more a call)
    assert loop > 200 and total > 0.3 * loop, (total, loop)
    for anc, n in marked:
        assert not n["children"], n  # the innermost frame (no kernel stacks asked for)
        parent = anc[-1]["name"]
        # the runtime's entry, or on a GPU the driver's (cuLaunchKernel: exact and sampled mode probe both)
        assert parent in PROBED or parent.startswith("[uprobes]+"), [a["name"] for a in anc]
        assert any(a["kind"] == "python" for a in anc) or parent.startswith("[uprobes]+")
    assert any(w.startswith(f"{PROBE} on ") for w in doc["warnings"]), doc["warnings"]


def test_without_gpu_probes_nothing_is_marked(captures: dict[str, dict]) -> None:
    doc = captures["cpu"]
    assert not [n for _, n in walk(doc) if n["name"] == PROBE]
    assert "cpu_samples_in_probes" not in doc["stats"]
    assert doc["stats"]["cpu_samples"] > 200


def test_the_analyzer_leaves_probe_time_out_of_the_lines_host_time(captures: dict[str, dict]) -> None:
    """Samples in the return's trampoline sit under the line's own native frames, not under the call: marked,
    the analyzer counts them with the call's time (api_samples), not as host work a fix could remove."""
    doc = captures["exact"]
    line = line_of(TARGET, "LINE_LAUNCH")
    under_line = [(anc, n) for anc, n in walk(doc)
                  if any(a["kind"] == "python" and a["line"] == line for a in [*anc, n])]
    in_call = sum(n["metrics"]["cpu_samples"] for anc, n in under_line
                  if any(a["name"] in ("cudaLaunchKernel", PROBE) for a in [*anc, n]))
    group = next(g for (tid, site), g in build_index(doc).samples.items() if site is not None and site.line == line)
    assert group.samples == sum(n["metrics"]["cpu_samples"] for _, n in under_line)
    assert group.api_samples == in_call and in_call > 0


def test_launch_cost_takes_the_probes_out_of_the_launches_time(captures: dict[str, dict]) -> None:
    """Exact mode's measured time of a launch holds most of deepctx's trap (the clock runs from the entry probe's
    end to the return probe's start); the launch-cost rules take a launch's time inside the call from the CPU
    samples in its own code instead (rules/common.launch_call_ns). The host time per launch they estimate from
    comes out nearer the loop's own, as the loop measured it alone before the capture: the probes still slow
    the loop's own code (its samples outside the call), which no sample can tell from the code's own time."""
    doc = captures["exact"]
    alone = captures["alone_ns"]["ns"]
    line = line_of(TARGET, "LINE_LAUNCH")
    idx = build_index(doc)
    site = next(s for s in idx.site_samples if s is not None and s.line == line)
    records = [r for r in idx.gpu if r.ctx.site == site and r.api_class == apis.LAUNCH]
    cost = launch_cost(idx, site, records)
    measured = (cost.host_ns + cost.probe_ns) / cost.launches
    print(f"alone {alone:.0f} ns an iteration; profiled: {cost.per_launch_ns:.0f} ns with the calls' samples, "
          f"{measured:.0f} ns with their measured time ({cost.probe_ns / cost.launches:.0f} ns of it deepctx's)")
    g = idx.site_samples[site]
    assert g.launch_call_samples >= 20 and cost.probe_ns > 0, g
    # the probes are a large share of a launch's measured time: most of it where the call fails at once (the
    # development VM), about half where it reaches a GPU (0.50 on an H100, 2026-12-06)
    share = cost.probe_ns / launch_api_ns(records)
    print(f"the probes' share of the launches' measured time: {share:.2f}")
    assert share > 0.3, (cost.probe_ns, launch_api_ns(records))
    # nearer the loop alone than the measured time puts it, and within twice it
    assert abs(cost.per_launch_ns - alone) < 0.6 * abs(measured - alone), (cost.per_launch_ns, measured, alone)
    assert cost.per_launch_ns < 2 * alone, (cost.per_launch_ns, alone)
