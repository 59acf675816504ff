"""A real ClickHouse server (Debian's clickhouse-server 18.16, HTTP interface) receives the windows the
store exports, and `deepctx fleet top` / `deepctx fleet profile` answer from it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import store_producer as sp
from harness import DEEPCTX, wait_for
from service_env import free_port

from deepctx.daemon.fleet.exporter import FleetExporter, sinks_from
from deepctx.daemon.store import WindowStore

CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{dir}/data/</path>
  <tmp_path>{dir}/tmp/</tmp_path>
  <user_files_path>{dir}/user_files/</user_files_path>
  <format_schema_path>{dir}/format_schemas/</format_schema_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>104857600</mark_cache_size>
  <uncompressed_cache_size>104857600</uncompressed_cache_size>
  <mlock_executable>false</mlock_executable>
</yandex>
"""
USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile>
  <quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows>
  <read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
"""


@pytest.fixture
def clickhouse(tmp_path: Path) -> Iterator[str]:
    if not shutil.which("clickhouse-server"):
        pytest.skip("Debian's clickhouse-server is not installed")
    http = free_port()
    (tmp_path / "config.xml").write_text(CONFIG.format(http=http, tcp=free_port(), dir=tmp_path))
    (tmp_path / "users.xml").write_text(USERS)
    proc = subprocess.Popen(["clickhouse-server", f"--config-file={tmp_path / 'config.xml'}"],
                            stdout=(tmp_path / "server.log").open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{http}"

    def ping() -> bool:
        try:
            return urllib.request.urlopen(url + "/ping", timeout=2).read() == b"Ok.\n"
        except OSError:
            return proc.poll() is not None  # ends the wait; asserted below

    try:
        wait_for(ping, 60, "ClickHouse to answer")
        assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def fleet(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*DEEPCTX, "fleet", "--clickhouse", url, "--database", "fleet_test", *args],
                          capture_output=True, text=True, timeout=120)


def test_windows_reach_clickhouse_and_fleet_top_answers(clickhouse: str, tmp_path: Path) -> None:
    store = WindowStore(str(tmp_path / "w.db"))
    exporter = FleetExporter(sinks_from(clickhouse, "fleet_test", "", ""))
    store.add_listener(exporter.on_window)
    exporter.start()
    start = time.time() - 1800
    for w in sp.windows(start, 3, host="gpu-a") + sp.windows(start, 2, host="gpu-b", names=("h200_torch_ops",)):
        store.put(w)
    assert exporter.wait_idle(120)
    exporter.stop()
    assert exporter.counters.exported == {"clickhouse": 11} and exporter.counters.failed == {"clickhouse": 0}

    r = fleet(clickhouse, "top", "--since", "1h", "--format", "json")
    assert r.returncode == 0, r.stderr
    top = json.loads(r.stdout)
    assert top["sort"] == "cpu_samples"
    rows = [(p["host"], p["pid"], p["windows"]) for p in top["processes"]]
    assert rows == [("gpu-a", 2267, 3), ("gpu-a", 1498, 3), ("gpu-a", 604, 3), ("gpu-b", 604, 2)]
    torch_a = top["processes"][2]
    assert (torch_a["metrics"]["launches"], torch_a["metrics"]["copy_bytes"]) == (3 * 1091, 3 * 200)
    kernel = top["kernels"][0]
    assert kernel["name"].startswith("_ZN2at6native29vectorized_elementwise") and kernel["metrics"]["calls"] == 5000
    assert kernel["processes"] == 2  # one pid on two hosts
    local = store.top(start, 10)  # the same ranking as the host's own store
    assert [(ln.file, ln.line) for ln in local.lines] == [(ln["file"], ln["line"]) for ln in top["lines"]]
    r = fleet(clickhouse, "top", "--since", "1h", "--host", "gpu-b")
    assert r.returncode == 0 and "gpu-b" in r.stdout and "jax_jit.py" not in r.stdout

    r = fleet(clickhouse, "profile", "--since", "1h", "--pid", "604", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["stats"]["windows"] == 5 and doc["pid"] == 604
    assert sp.totals(doc) == {k: 5 * v for k, v in sp.totals(sp.fixture("h200_torch_ops")).items()}
    r = fleet(clickhouse, "profile", "--since", "1h", "--host", "nowhere")
    assert r.returncode == 1 and "no windows" in r.stderr
    r = subprocess.run([*DEEPCTX, "fleet", "--clickhouse", "http://127.0.0.1:1", "top"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "cannot reach ClickHouse" in r.stderr
