"""`deepctx attach --gpu-duty` with the CUPTI agent: device times scaled up to the capture, and what the
agent recorded in each attached share measured three ways (daemon/device_share.py). A target launching at a
fixed rate gives the true GPU time of the capture (the mock CUDA libraries, the real agent and BPF). With
MOCK_CUPTI_COMPLETED_ONLY=1 the mock CUPTI flushes as CUPTI documents it: an ordinary flush keeps back any
buffer that holds a record of unfinished work, so on a busy device only the agent's stop (a forced flush
while the daemon's probes are still there) hands the records over."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from device_paths import TARGET
from harness import StdinTarget
from profile_paths import walk

sys.path.insert(0, str(TARGET.parent))
import mock_target as mt  # noqa: E402

MATMUL = "mock_matmul(float*, int)"
RATE = 1000  # launches a second


BUSY = {"MOCK_DEVICE_QUEUE_NS": "100000000", "MOCK_CUPTI_COMPLETED_ONLY": "1"}


def duty_capture(daemon, agent: Path, lib: Path, *target_args: str, env: dict[str, str] | None = None,
                 duty: tuple[str, ...] = ("--gpu-duty", "0.25", "--gpu-duty-period", "2"), seconds: int = 8,
                 ) -> tuple[dict, int]:
    """8 s of `deepctx attach --gpu-duty 0.25 --gpu-duty-period 2` (exact) on the steady target: the profile,
    and how many launches the target made."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"} | (env or {}) \
        | {"CUDA_INJECTION64_PATH": str(agent)}
    t = StdinTarget([sys.executable, str(TARGET), str(lib), "--steady", *target_args], env=env)
    try:
        r = daemon.cli("attach", str(t.pid), "--duration", str(seconds), "--mode", "exact", "--gpu-activity",
                       "--quiet", "--format", "json", *duty, timeout=120)
        t.send("stop")
        launched = int(t.expect("launched").split()[1])
    finally:
        t.stop()
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), launched


@pytest.mark.parametrize("finalize", ["0", "1"], ids=["unsubscribe", "cuptiFinalize (default)"])
def test_scaled_device_time_matches_the_launch_rate(daemon, built: tuple[Path, Path], finalize: str) -> None:
    """Each share's stop lets CUPTI go (finalized with DEEPCTX_CUPTI_FINALIZE=1) and the next start takes it
    again: every share's records come, timed on the agent's clock."""
    doc, launched = duty_capture(daemon, *built, str(RATE), env={"DEEPCTX_CUPTI_FINALIZE": finalize})
    stats = doc["stats"]
    gpu_ns = sum(n["metrics"]["gpu_time_ns"] for _, n in walk(doc) if n["kind"] == "kernel" and n["name"] == MATMUL)
    expected = RATE * doc["duration_s"] * mt.MATMUL_NS
    assert launched >= RATE * doc["duration_s"]  # the target kept its rate through the capture
    # scaled by how long the agent recorded (daemon/device_share.py): an idle device, kernels run at launch
    assert abs(gpu_ns - expected) <= 0.05 * expected, (gpu_ns, expected, stats)
    # each attached share's record kept three ways; none much longer than the probes' time attached (the
    # first share's records began as the capture attached, before its duty cycle's clock started)
    shares = stats["device_shares"]
    assert shares >= 4, stats  # 8 s in periods of 2 s
    attached_ms = stats["gpu_probe_duty_permille"] * doc["duration_s"]
    assert stats["device_share_records"] == stats["device_records"], stats
    for k in ("active_to_flush", "first_record_to_flush", "span"):
        assert 0 < stats[f"device_share_ms_{k}"] <= 1.1 * attached_ms, (k, stats)
    # at 1000 launches a second the records span their share to within a few launches of it
    assert stats["device_share_ms_span"] >= stats["device_share_ms_first_record_to_flush"] - 5 * shares, stats


def test_a_busy_device_is_scaled_by_how_long_the_agent_recorded(daemon, built: tuple[Path, Path]) -> None:
    """A device kept busy (2 ms kernels asked for 1000 times a second, at most 100 ms of work queued, records
    handed over once their work is done, as on a GPU): every second of the capture holds a second of kernels.
    Scaled by the first record's start to each share's flush, the profile's device time is the capture's;
    scaled by the time the probes were attached (the control), it would come out short."""
    doc, _ = duty_capture(daemon, *built, str(RATE), "--kernel-ns", "2000000", env=BUSY)
    stats = doc["stats"]
    shown = {k: v for k, v in stats.items() if k.startswith(("device_share", "device_rec", "gpu_probe", "device_time"))}
    capture_ms = 1000 * doc["duration_s"]
    gpu_ms = sum(n["metrics"]["gpu_time_ns"] for _, n in walk(doc) if n["kind"] == "kernel") / 1e6
    assert abs(gpu_ms - capture_ms) <= 0.04 * capture_ms, (gpu_ms, capture_ms, shown)
    recorded_ms = stats["device_time_ns"] / 1e6  # as recorded, before scaling
    # scaled by first record to flush (the stop); every share's records came (an ordinary flush kept them
    # all back: the old way's shares were all lost here)
    assert stats["device_recorded_ms"] == stats["device_share_ms_first_record_to_flush"], shown
    assert stats["device_shares_lost"] == 0 and stats["device_share_records"] == stats["device_records"], shown
    # each stop handed over the queued work unfinished: at most 100 ms of 2 ms kernels (and a few in flight)
    assert 0 < stats["device_records_unfinished_at_stop"] <= 55 * stats["device_shares"], shown
    assert abs(recorded_ms - stats["device_recorded_ms"]) <= 0.04 * recorded_ms, shown
    attached_ms = stats["gpu_probe_duty_permille"] * doc["duration_s"]
    assert recorded_ms * capture_ms / attached_ms < 0.92 * capture_ms, shown  # the control: short


def test_a_whole_capture_of_a_busy_device_keeps_its_records_to_the_end(daemon, built: tuple[Path, Path]) -> None:
    """No duty cycle, the device never idle: an ordinary flush never hands a record over (every buffer holds
    one of queued work), so the capture's end must stop the agent before the probes go. Every second from
    the first recorded kernel's start (behind the 100 ms queue the attach found) to the end holds a second
    of kernels."""
    doc, _ = duty_capture(daemon, *built, str(RATE), "--kernel-ns", "2000000", env=BUSY, duty=(), seconds=3)
    stats = doc["stats"]
    shown = {k: v for k, v in stats.items() if k.startswith(("device_rec", "device_agent", "device_time"))}
    capture_ms = 1000 * doc["duration_s"]
    gpu_ms = sum(n["metrics"]["gpu_time_ns"] for _, n in walk(doc) if n["kind"] == "kernel") / 1e6
    # less the 100 ms queue the attach found (three runs: 73 to 89 ms short); the agent's probes attach
    # last, just before the duration starts, and its stop comes just after the duration ends
    assert capture_ms - 150 <= gpu_ms <= capture_ms + 100, (gpu_ms, capture_ms, shown)
    assert 0 < stats["device_records_unfinished_at_stop"] <= 55, shown  # the queue at the end
    assert stats["device_records_dropped_by_cupti"] == 0, shown
