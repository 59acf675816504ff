"""A real Prometheus (Debian's `prometheus`) scrapes deepctxd's /metrics on loopback, and its HTTP API
returns the series: per-process GPU launches and copies from a real capture, the daemon's own memory."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from harness import StdinTarget, cuda_runtime, profile_phase, wait_for
from profile_paths import walk
from service_env import free_port

from deepctx.daemon.metrics import command_label

TARGET = Path(__file__).resolve().parents[2] / "targets" / "gpu" / "runtime_calls.py"


def query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        body = json.loads(urllib.request.urlopen(url, timeout=5).read())
    except OSError:
        return []
    return body["data"]["result"] if body.get("status") == "success" else []


@pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus is not installed")
def test_prometheus_scrapes_the_series(service_dir, stopped) -> None:
    metrics_port, prom_port = free_port(), free_port()
    d = service_dir.start(metrics_address=f"127.0.0.1:{metrics_port}")
    stopped.append(d)
    t = StdinTarget([sys.executable, str(TARGET), "cuda", cuda_runtime()])
    doc = profile_phase(d, t)
    launches = sum(n["metrics"]["calls"] for _, n in walk(doc) if n["kind"] == "kernel")
    copied = sum(n["metrics"]["bytes"] for _, n in walk(doc) if n["kind"] == "memcpy")
    assert launches > 0 and copied > 0
    conf = service_dir.path / "prometheus.yml"
    conf.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: deepctxd\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{metrics_port}']\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={service_dir.path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=(service_dir.path / "prometheus.log").open("w"))
    try:
        sel = f'pid="{t.pid}",job="deepctxd"'
        got = wait_for(lambda: query(prom_port, f"deepctx_process_gpu_launches_total{{{sel}}}"), 60,
                       "Prometheus to have scraped the launches series")
        assert float(got[0]["value"][1]) == launches
        assert got[0]["metric"]["command"] == command_label(doc["command"])
        got = query(prom_port, f"deepctx_process_copy_bytes_total{{{sel}}}")
        assert float(got[0]["value"][1]) == copied
        got = query(prom_port, f"deepctx_process_cpu_samples_total{{{sel}}}")
        assert float(got[0]["value"][1]) == doc["stats"]["cpu_samples"]
        got = query(prom_port, 'deepctx_daemon_events_total{event="captures_completed"}')
        assert float(got[0]["value"][1]) == 1
        rss = query(prom_port, 'process_resident_memory_bytes{job="deepctxd"}')
        assert 10e6 < float(rss[0]["value"][1]) < 1e9
        assert query(prom_port, 'up{job="deepctxd"}')[0]["value"][1] == "1"
        assert query(prom_port, "deepctx_attached_targets")[0]["value"][1] == "0"
    finally:
        prom.terminate()
        prom.wait(timeout=30)
