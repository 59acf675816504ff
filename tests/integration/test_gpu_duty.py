"""`deepctx attach --gpu-duty`: one capture's GPU probes are on for their share of each period and off for
the rest (launches made then cost no trap and are not counted), and the profile scales what they counted up
to the capture and says by how much (the real CUDA runtime, no GPU)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import sys
from pathlib import Path

import grpc
from harness import StdinTarget, cuda_runtime, wait_for
from profile_paths import walk

from deepctx.proto.v1 import deepctx_pb2 as pb
from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc

ON_DEMAND = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "launch_on_demand.py"


def test_one_capture_probes_its_share_of_each_period_and_scales_up(daemon) -> None:
    stub = pb_grpc.ProfilerStub(grpc.insecure_channel(f"unix:{daemon.socket}"))
    t = StdinTarget([sys.executable, str(ON_DEMAND), cuda_runtime()])

    def live() -> dict[str, int]:
        for s in stub.Status(pb.StatusRequest(), timeout=10).sessions:
            if s.pid == t.pid and s.state == "capturing":
                return dict(s.stats)
        return {}

    def burst(attached: int, n: int) -> int:
        """n launches inside one phase (a burst that straddles a switch is tried again); how many the
        probes counted."""
        while True:
            wait_for(lambda: live().get("gpu_probes_attached") == attached, timeout=30,
                     what=f"probes attached={attached}")
            before = live()
            t.send(str(n))
            t.expect(f"done {n}")
            after = live()
            if (after.get("gpu_probes_attached") == before["gpu_probes_attached"] == attached and
                    after.get("gpu_probe_resumes") == before["gpu_probe_resumes"]):
                return after["gpu_api_calls"] - before["gpu_api_calls"]

    try:
        with cf.ThreadPoolExecutor(1) as pool:
            capture = pool.submit(daemon.cli, "attach", str(t.pid), "--duration", "8", "--gpu", "--format", "json",
                                  "--quiet", "--gpu-duty", "0.5", "--gpu-duty-period", "2")
            wait_for(lambda: "gpu_probes_attached" in live(), timeout=60, what="the capture")
            assert burst(0, 50) == 0  # off: no trap, not seen
            assert burst(1, 30) == 30  # on: every one counted
            assert burst(0, 40) == 0
            assert live()["gpu_probe_resumes"] >= 1  # off, then on again: a new period in the one capture
            r = capture.result(timeout=120)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        permille = doc["stats"]["gpu_probe_duty_permille"]
        assert 400 <= permille <= 600, doc["stats"]  # half of each 2 s period, give or take the switches
        launches = [n for _, n in walk(doc) if n["kind"] == "kernel"]
        assert launches, doc
        calls = sum(n["metrics"]["calls"] for n in launches)
        # the 30 counted, scaled by capture / time on (about 2x)
        assert abs(calls - 30 * 1000 / permille) <= 1.5, (calls, permille)
    finally:
        t.stop()
