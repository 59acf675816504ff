"""What several rules compute from the index: steady-state GPU records per site, and host time per site."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from deepctx.profiles.analyzer import apis
from deepctx.profiles.analyzer.index import GpuRecord, ProfileIndex, Site
from deepctx.profiles.analyzer.names import short_kernel_name

ONE_WAVE_THREADS_PER_SM = 2048  # resident threads per multiprocessor on every NVIDIA GPU since Volta
ASSUMED_TINY_KERNEL_NS = 2_000  # a kernel that fits in one wave finishes in a few µs on current GPUs


def steady(records: Iterable[GpuRecord]) -> list[GpuRecord]:
    """Records outside compilation and autotuning: what the program does in every step."""
    return [r for r in records if not r.ctx.compile]


def launches(idx: ProfileIndex) -> list[GpuRecord]:
    """Kernel launches in steady state (graph launches are not kernels of their own)."""
    return [r for r in steady(idx.gpu) if r.kind == "kernel" and r.calls and not r.name.startswith("[graph")]


def by_site(records: Iterable[GpuRecord]) -> dict[Site | None, list[GpuRecord]]:
    out: dict[Site | None, list[GpuRecord]] = defaultdict(list)
    for r in records:
        out[r.ctx.site].append(r)
    return out


def cpu_ns(idx: ProfileIndex, samples: int) -> int:
    return int(samples * 1e9 / idx.sample_hz) if idx.sample_hz else 0


def site_cpu_ns(idx: ProfileIndex, site: Site | None, tid: int | None = None) -> int:
    """Steady-state CPU time at a site outside GPU API calls (Python, framework), on one thread or all."""
    g = idx.site_samples.get(site) if tid is None else idx.samples.get((tid, site))
    return cpu_ns(idx, g.samples - g.api_samples - g.compile_samples) if g else 0


def sites_with_gpu_calls(idx: ProfileIndex) -> set[Site | None]:
    return {r.ctx.site for r in idx.gpu if r.calls}


def pure_host_ns(idx: ProfileIndex, tid: int | None) -> int:
    """CPU time of a thread at lines that make no GPU call (data loading included): work the GPU could
    overlap with if nothing made the host wait."""
    gpu_sites = sites_with_gpu_calls(idx)
    s = sum(g.samples - g.api_samples - g.compile_samples for (t, st), g in idx.samples.items()
            if t == tid and st is not None and st not in gpu_sites)
    return cpu_ns(idx, max(0, s))


def launch_api_ns(records: Iterable[GpuRecord]) -> int:
    return sum(r.api_time_ns for r in records if r.api_class in (apis.LAUNCH, apis.GRAPH))


@dataclass(frozen=True)
class LaunchCost:
    """What a site's launches cost the host: its CPU time outside GPU calls plus the time inside its launch
    calls, per launch (launch-bound-loop, unfused-optimizer)."""

    launches: int
    host_ns: int
    measured: bool  # the records carry GPU time
    gpu_ns: int  # their GPU time
    probe_ns: int = 0  # deepctx's time in the launches' measured API time, left out of host_ns (launch_call_ns)

    @property
    def per_launch_ns(self) -> float:
        return self.host_ns / self.launches

    def removable_ns(self, launches: int, kernel_ns: float, idle_ns: int | None) -> float:
        """The host's cost above the GPU's of `launches` launches of kernel_ns each: what goes when they are
        launched at once (a graph, a fused kernel). Launch cost the GPU hid behind other work costs nothing."""
        removable = launches * (self.per_launch_ns - kernel_ns)
        return min(removable, idle_ns) if idle_ns is not None else removable


# fewer samples than this inside a site's launch calls: their measured API time stands
MIN_LAUNCH_CALL_SAMPLES = 20


def launch_call_ns(idx: ProfileIndex, site: Site | None, records: list[GpuRecord]) -> tuple[int, int]:
    """The host's time inside a site's launch calls: (the estimate, deepctx's time taken out of the measured).

    Both ways to know it hold some of deepctx's cost. Exact mode times a launch from its entry probe's clock
    read to its return probe's, and on the host VMs most of that is deepctx's: the rest of the entry trap (the
    uprobe handler's return work, setting up the return probe, the way back to user mode), a nested driver
    call's own trap, and the return probe's trap (tests/integration/test_probe_samples.py: 1.08 microseconds
    timed where the call's own code took 0.09). A launch does not wait, so its time inside the call is CPU
    time, which the CPU samples in its code measure with the probes' samples left out
    (index.SampleGroup.launch_call_samples); with the CUPTI agent, those also hold CUPTI's callbacks, which
    the agent's own API timing leaves out. So where the site has enough samples in its launches, the lesser of
    the two stands (sampled mode times no launch: the samples), else the measured time."""
    measured = launch_api_ns(records)
    g = idx.site_samples.get(site)
    if g is None or idx.sample_hz <= 0 or g.launch_call_samples < MIN_LAUNCH_CALL_SAMPLES:
        return measured, 0
    sampled = cpu_ns(idx, g.launch_call_samples)
    if measured and measured <= sampled:
        return measured, 0
    return sampled, max(0, measured - sampled)


def launch_cost(idx: ProfileIndex, site: Site | None, records: list[GpuRecord]) -> LaunchCost:
    in_calls, probes = launch_call_ns(idx, site, records)
    return LaunchCost(sum(r.calls for r in records), site_cpu_ns(idx, site) + in_calls,
                      any(r.gpu_time_ns for r in records), sum(r.gpu_time_ns for r in records), probes)


def launch_evidence(cost: LaunchCost, records: list[GpuRecord], kernel_ns: float) -> dict[str, object]:
    """What the launch-cost rules (launch-bound-loop, unfused-optimizer) show of a site's launches: their count,
    the host's time per launch, the kernels and, where the paths have operator nodes, the operators behind
    them, and the GPU time per launch measured (or the one assumed)."""
    evidence: dict[str, object] = {"launches": cost.launches, "host_per_launch_ns": round(cost.per_launch_ns),
                                   "host_time_ns": cost.host_ns, "kernels": top_kernels(records)}
    if cost.probe_ns:
        evidence["probe_time_removed_ns"] = cost.probe_ns
    ops = top_operators(records)
    if ops:
        evidence["operators"] = ops
    if cost.measured:
        evidence["gpu_per_launch_ns"] = round(kernel_ns)
    else:
        evidence["assumed_gpu_per_launch_ns"] = ASSUMED_TINY_KERNEL_NS
    return evidence


def top_kernels(records: Iterable[GpuRecord], n: int = 3) -> list[dict[str, object]]:
    return _most_launches("kernel", ((short_kernel_name(r.name), r.calls) for r in records), n)


def top_operators(records: Iterable[GpuRecord], n: int = 3) -> list[dict[str, object]]:
    """The operator nodes (aten::mul.Tensor) the launches came from, most launches first; [] without them."""
    return _most_launches("operator", ((r.ctx.operator, r.calls) for r in records if r.ctx.operator), n)


def _most_launches(what: str, launches: Iterable[tuple[str, int]], n: int) -> list[dict[str, object]]:
    counts: dict[str, int] = defaultdict(int)
    for name, calls in launches:
        counts[name] += calls
    return [{what: k, "launches": c} for k, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def site_text(site: Site | None) -> str:
    if site is None:
        return "code without a Python frame"
    if site.file is None:
        return site.function
    return f"{site.function}() at line {site.line}"
