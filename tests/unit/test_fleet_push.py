"""Fleet export without servers of record: ClickHouse rows of a window, and a Pyroscope-style /ingest
on a loopback HTTP server that checks the request as Pyroscope reads it."""

from __future__ import annotations

import email.parser
import email.policy
import gzip
import http.server
import threading
import urllib.parse
from collections.abc import Iterator

import pytest
import store_producer as sp

from deepctx.daemon.fleet import pyroscope
from deepctx.daemon.fleet.exporter import FleetExporter, Sink
from deepctx.profiles.fleet import schema
from deepctx.profiles.metrics import METRICS
from deepctx.profiles.summary import summarize
from deepctx.proto.pprof import profile_pb2

T0 = 1_800_000_000.0


def test_clickhouse_rows_carry_every_cost_once() -> None:
    w = sp.windows(T0, 1, names=("h200_torch_ops",))[0]
    rows = list(schema.rows(w))
    assert {m: sum(r[m] for r in rows) for m in METRICS} == sp.totals(w.profile)
    kernel = next(r for r in rows if r["name"].startswith("_ZN2at6native29vectorized_elementwise"))
    assert (kernel["kind"], kernel["calls"], kernel["path_kind"][0], kernel["path_kind"][-1]) == (
        "kernel", 1000, "thread", "kernel")
    assert len(kernel["path_name"]) == len(kernel["path_line"]) == len(kernel["path_module"])
    assert (kernel["window_start"], kernel["window_end"], kernel["container"]) == (
        int(T0), int(T0) + 60, sp.CONTAINERS["h200_torch_ops"])
    assert kernel["line_file"].endswith("torch_ops.py") and kernel["line_no"] > 0
    # rows rebuild the tree they came from
    doc = schema.tree_from_paths([{**r, **{f"path_{f}": r[f"path_{f}"] for f in schema.PATH_FIELDS}} for r in rows],
                                 {"command": w.command, "windows": 1})
    assert sp.totals(doc) == sp.totals(w.profile)


def test_sql_literals_are_quoted() -> None:
    assert schema.quote("a'b\\c") == "'a\\'b\\\\c'"
    cond = schema.where(T0, T0 + 60, host="h'; DROP TABLE x; --", command="py")
    assert "host = 'h\\'; DROP TABLE x; --'" in cond
    with pytest.raises(ValueError):
        schema.check_identifier("deepctx; DROP")


class Ingest(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        url = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body)
        parts = {p.get_param("name", header="content-disposition"): p.get_content() for p in msg.iter_parts()}
        Ingest.received.append({"path": url.path, "query": dict(urllib.parse.parse_qsl(url.query)), "parts": parts})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def ingest() -> Iterator[str]:
    Ingest.received = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ingest)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_pyroscope_ingest_request(ingest: str) -> None:
    windows = sp.windows(T0, 2, names=("h200_triton_kernel",))
    exporter = FleetExporter([Sink("pyroscope", lambda w: pyroscope.push(ingest, "deepctx.gpu", w))])
    exporter.start()
    for w in windows:
        exporter.on_window(w, summarize(w.profile))
    assert exporter.wait_idle(30)
    exporter.stop()
    assert exporter.counters.exported == {"pyroscope": 2} and exporter.counters.failed == {"pyroscope": 0}
    assert len(Ingest.received) == 2
    req = Ingest.received[0]
    q = req["query"]
    assert req["path"] == "/ingest"
    assert (q["format"], q["from"], q["until"], q["sampleRate"], q["spyName"]) == (
        "pprof", str(int(T0)), str(int(T0) + 60), "99", "deepctx")
    assert q["name"] == f"deepctx.gpu{{host=gpu-test-01,pid=1498,container={sp.CONTAINERS['h200_triton_kernel']}," \
                        f"command=python3}}"
    prof = profile_pb2.Profile.FromString(gzip.decompress(req["parts"]["profile"]))
    types = [prof.string_table[t.type] for t in prof.sample_type]
    assert types == ["cpu_samples", "calls", "api_time", "gpu_time", "bytes", "sync_wait"]
    sums = [sum(s.value[i] for s in prof.sample) for i in range(len(types))]
    assert sums == list(sp.totals(windows[0].profile).values())


def test_failed_exports_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deepctx.daemon.fleet.exporter.RETRY_DELAYS_S", (0.0, 0.0))
    calls = []

    def refuse(w: object) -> None:
        calls.append(w)
        raise OSError("refused")

    exporter = FleetExporter([Sink("x", refuse)], max_queue=1)
    w = sp.windows(T0, 1, names=("h200_torch_ops",))[0]
    exporter.on_window(w, summarize(w.profile))  # queued (the thread is not running yet)
    exporter.on_window(w, summarize(w.profile))  # queue full: dropped
    exporter.start()
    assert exporter.wait_idle(30)
    exporter.stop()
    assert (len(calls), exporter.counters.failed, exporter.counters.dropped_queue_full) == (3, {"x": 1}, 1)
