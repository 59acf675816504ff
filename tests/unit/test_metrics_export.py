"""The /metrics text for windows and captures: exact per-process values, daemon counters, lost events."""

from __future__ import annotations

import urllib.request

import store_producer as sp
from prometheus_client.parser import text_string_to_metric_families

from deepctx.daemon.metrics import (
    DaemonSnapshot,
    MetricsServer,
    ProcessTotals,
    command_label,
    summary_of_message,
    window_listener,
)
from deepctx.daemon.store.wire import to_message
from deepctx.profiles.summary import summarize


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_windows_and_daemon_counters_are_served() -> None:
    procs = ProcessTotals()
    on_window = window_listener(procs)
    for w in sp.windows(1_800_000_000.0, 3, names=("h200_torch_ops",)):
        on_window(w, summarize(w.profile))
    server = MetricsServer("127.0.0.1:0", procs, lambda: DaemonSnapshot(attached_targets=2, totals={"captures_started": 5},
                                                                      connections=1, counters={"relay_refused": 3}))
    server.start()
    try:
        m = scrape(server.port)
    finally:
        server.stop()
    labels = tuple(sorted({"pid": "604", "command": command_label(sp.fixture("h200_torch_ops")["command"]),
                           "container": sp.CONTAINERS["h200_torch_ops"]}.items()))
    assert m[("deepctx_process_gpu_launches_total", labels)] == 3 * 1091
    assert m[("deepctx_process_gpu_launches_per_second", labels)] == 1091 / 60
    assert m[("deepctx_process_copy_bytes_total", labels)] == 3 * 200
    assert m[("deepctx_process_sync_wait_seconds_total", labels)] == 3 * 50276254 / 1e9
    assert m[("deepctx_process_cpu_samples_total", labels)] == 3 * 26
    assert m[("deepctx_process_profiled_seconds_total", labels)] == 180.0
    assert m[("deepctx_attached_targets", ())] == 2
    assert m[("deepctx_connections", ())] == 1
    assert m[("deepctx_daemon_events_total", (("event", "captures_started"),))] == 5
    assert m[("deepctx_daemon_events_total", (("event", "relay_refused"),))] == 3
    assert m[("deepctx_lost_events_total", (("counter", "cpu_user_stacks_lost"),))] == 0
    assert m[("process_resident_memory_bytes", ())] > 0  # the daemon's own memory and CPU
    assert ("process_cpu_seconds_total", ()) in m


def test_capture_message_summary_matches_the_document() -> None:
    doc = sp.fixture("h200_jax_jit")
    s, d = summary_of_message(to_message(doc)), summarize(doc)
    assert (s.totals, s.launches, s.copy_bytes) == (d.totals, d.launches, d.copy_bytes)
    assert s.lost == d.lost


def test_process_series_are_bounded() -> None:
    procs = ProcessTotals(max_processes=2)
    s = summarize(sp.fixture("h200_triton_kernel"))
    for pid in (1, 2, 3):
        procs.observe(pid, "cmd", "/", s, 1.0)
    assert [k[0] for k, _ in procs.snapshot()] == ["2", "3"] and procs.dropped == 1


def test_command_label_is_the_executable_not_the_command_line() -> None:
    procs = ProcessTotals()
    s = summarize(sp.fixture("h200_triton_kernel"))
    procs.observe(7, "/usr/bin/python3 train.py --token=hunter2", "", s, 1.0)
    procs.observe(8, "evil\x1b]0;t\x07 --x", "", s, 1.0)
    assert [k for k, _ in procs.snapshot()] == [("7", "python3", ""), ("8", "evil\\x1b]0;t\\x07", "")]
    full = ProcessTotals(full_command=True)
    full.observe(7, "/usr/bin/python3 train.py --token=hunter2", "", s, 1.0)
    assert [k for k, _ in full.snapshot()] == [("7", "/usr/bin/python3 train.py --token=hunter2", "")]
    assert command_label("[kworker/0:1]") == "[kworker/0:1]"
