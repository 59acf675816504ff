"""Each loaded BPF program's run count and run time, from the kernel's own accounting.

The kernel counts them only while `kernel.bpf_stats_enabled` is 1 (it costs two clock reads a run, so it is
off by default); deepctxd logs them at a capture's end when it is on, which is how a bench learns what each
probe costs on a real workload. The trap into a uprobe's program is not in its run time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")


def stats_enabled() -> bool:
    try:
        return STATS_SYSCTL.read_text().strip() == "1"
    except OSError:
        return False


def program_stats(bpf: Any) -> dict[str, tuple[int, int]]:
    """name -> (runs, run time ns) of every program bcc loaded into `bpf`, from /proc/self/fdinfo."""
    out: dict[str, tuple[int, int]] = {}
    for name, fn in bpf.funcs.items():
        fields: dict[str, str] = {}
        for line in Path(f"/proc/self/fdinfo/{fn.fd}").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        out[name.decode() if isinstance(name, bytes) else name] = (int(fields.get("run_cnt", 0)),
                                                                    int(fields.get("run_time_ns", 0)))
    return out


def ran(stats: dict[str, tuple[int, int]]) -> dict[str, dict[str, float]]:
    """The programs that ran, for a log line: runs, total ms and ns per run."""
    return {name: {"runs": runs, "ms": round(ns / 1e6, 3), "ns_per_run": round(ns / runs)}
            for name, (runs, ns) in sorted(stats.items(), key=lambda kv: -kv[1][1]) if runs}
