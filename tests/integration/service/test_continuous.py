"""Continuous mode: deepctxd finds a GPU process by itself, profiles it in windows, and the window store
answers `deepctx profile` and `deepctx top` with exact counts (the real CUDA runtime, no GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from harness import StdinTarget, line_of, session_of, wait_for
from profile_paths import total, walk

TARGET = Path(__file__).resolve().parents[2] / "targets" / "gpu" / "runtime_calls.py"
N_LAUNCH, N_HANDLE, N_MALLOC = 200, 4, 7


def launches_in_store(daemon, pid: int) -> int:
    r = daemon.cli("profile", "--pid", str(pid), "--since", "1h", "--format", "json")
    if r.returncode != 0:
        return -1
    return sum(n["metrics"]["calls"] for _, n in walk(json.loads(r.stdout)) if n["kind"] == "kernel")


def test_gpu_process_is_found_and_profiled_in_windows(service_dir, stopped) -> None:
    from test_gpu_api_cpu import cuda_runtime

    # probes attached the whole window: the counts are exact (the default duty cycle scales them)
    d = service_dir.continuous(continuous_window_s=1.0, continuous_scan_s=0.2, continuous_gpu_duty=1.0)
    stopped.append(d)
    t = StdinTarget([sys.executable, str(service_dir.linked(TARGET)), "cuda", cuda_runtime(), "--launches", str(N_LAUNCH)])
    try:
        # found by the scan (it maps libcudart), no attach asked for
        wait_for(lambda: (session_of(d, t.pid) or {}).get("state") == "capturing", timeout=120,
                 what="the continuous capture of the GPU process")
        st = session_of(d, t.pid)
        assert st is not None and "gpu" in st["probes"]
        t.go()
        t.expect("done")
        # every launch lands in some window; windows are cut every second
        wait_for(lambda: launches_in_store(d, t.pid) == N_LAUNCH + 2 * N_HANDLE, timeout=60,
                 what="all launches in the stored windows")
    finally:
        t.stop()
    r = d.cli("profile", "--pid", str(t.pid), "--since", "1h", "--format", "json")
    doc = json.loads(r.stdout)
    line = line_of(TARGET, "LINE_MALLOC")
    mallocs = 0
    stack: list[tuple[list[dict], dict]] = [([], doc["root"])]
    while stack:
        anc, n = stack.pop()
        if n["kind"] == "api" and n["name"] == "cudaMalloc" and any(a["line"] == line for a in anc):
            mallocs += n["metrics"]["calls"]
        stack.extend((anc + [n], c) for c in n["children"])
    assert mallocs == N_MALLOC  # counts stay exact in sampled mode, paths from the Python walker
    top = json.loads(d.cli("top", "--once", "--since", "1h", "--format", "json").stdout)
    assert t.pid in [p["pid"] for p in top["processes"]]


def test_two_gpu_processes_share_one_program_and_each_window_holds_its_own_calls(service_dir, stopped) -> None:
    """Two processes of one kind captured at once attach to one loaded program (#30: the second compiles
    nothing), whose windows are cut at the same instants: each process's stored windows hold exactly its own
    launches and mallocs, under its own Python line, while the other's run on the same maps."""
    import grpc
    from test_gpu_api_cpu import cuda_runtime

    from deepctx.proto.v1 import deepctx_pb2 as pb
    from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc

    d = service_dir.continuous(continuous_window_s=1.0, continuous_scan_s=0.2, continuous_gpu_duty=1.0)
    stopped.append(d)
    stub = pb_grpc.ProfilerStub(grpc.insecure_channel(f"unix:{d.socket}"))
    launches = {0: N_LAUNCH, 1: 3 * N_LAUNCH}  # different counts: a window that took the other's would show
    ts = [StdinTarget([sys.executable, str(service_dir.linked(TARGET)), "cuda", cuda_runtime(), "--launches",
                       str(n)]) for n in launches.values()]
    try:
        wait_for(lambda: all((session_of(d, t.pid) or {}).get("state") == "capturing" for t in ts), timeout=120,
                 what="both GPU processes captured")
        totals = stub.Status(pb.StatusRequest(), timeout=10).totals
        assert totals["bpf_programs_built"] == 1 and totals["bpf_programs_shared"] == 1, dict(totals)
        for t in ts:
            t.go()
        for t in ts:
            t.expect("done")
        for i, t in enumerate(ts):
            wait_for(lambda t=t, i=i: launches_in_store(d, t.pid) == launches[i] + 2 * N_HANDLE, timeout=60,
                     what=f"process {i}'s launches in its stored windows")
    finally:
        for t in ts:
            t.stop()
    line = line_of(TARGET, "LINE_MALLOC")
    for t in ts:
        doc = json.loads(d.cli("profile", "--pid", str(t.pid), "--since", "1h", "--format", "json").stdout)
        mallocs = sum(n["metrics"]["calls"] for anc, n in walk(doc) if n["kind"] == "api" and n["name"] == "cudaMalloc"
                      and any(a["kind"] == "python" and a["line"] == line for a in anc))
        assert mallocs == N_MALLOC
    assert stub.Status(pb.StatusRequest(), timeout=10).totals["bpf_programs_built"] == 1


SPINNER = """\
import ctypes, os, sys, time
lib = ctypes.CDLL(sys.argv[1])
stub = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value)
grid = ctypes.c_uint64(1 | (1 << 32))
def spin_{name}():
    while True:
        end = time.monotonic() + 0.002
        while time.monotonic() < end:
            pass
        lib.cudaLaunchKernel(stub, grid, ctypes.c_uint32(1), grid, ctypes.c_uint32(1), None, ctypes.c_size_t(0), None)
print("ready", os.getpid(), flush=True)
spin_{name}()  # {folder}
"""


def test_a_process_left_alone_on_a_shared_program_is_still_sampled_and_probed(service_dir, stopped) -> None:
    """The first capture on a shared program opens its perf events and the last closes them: when one of two
    processes exits, the other's windows go on with CPU samples and GPU calls, and neither process's windows
    hold the other's functions."""
    from harness import Target
    from test_gpu_api_cpu import cuda_runtime

    d = service_dir.continuous(continuous_window_s=1.0, continuous_scan_s=0.2, continuous_gpu_duty=1.0)
    stopped.append(d)

    def spinner(name: str) -> Target:
        return Target([sys.executable, "-c", SPINNER.format(name=name, folder=service_dir.path), cuda_runtime()])

    def stored(pid: int) -> tuple[int, int, set[str]]:
        """(CPU samples, launches, spin_* functions) in pid's stored windows."""
        r = d.cli("profile", "--pid", str(pid), "--since", "1h", "--format", "json")
        if r.returncode != 0:
            return 0, 0, set()
        doc = json.loads(r.stdout)
        calls = sum(n["metrics"].get("calls", 0) for _, n in walk(doc) if n["kind"] == "kernel")
        return total(doc), calls, {n["name"] for _, n in walk(doc) if n["name"].startswith("spin_")}

    with spinner("a") as a, spinner("b") as b:
        wait_for(lambda: all((session_of(d, t.pid) or {}).get("state") == "capturing" for t in (a, b)),
                 timeout=120, what="both processes captured")
        wait_for(lambda: all(stored(t.pid)[0] > 0 and stored(t.pid)[1] > 0 for t in (a, b)), timeout=60,
                 what="windows of both")
        a.proc.kill()
        a.proc.wait()
        wait_for(lambda: session_of(d, a.pid) is None, timeout=60, what="the first process's capture ended")
        samples, calls, _ = stored(b.pid)
        # alone on the program now: still sampled (its perf events stayed open) and probed
        wait_for(lambda: stored(b.pid)[0] > samples + 19 and stored(b.pid)[1] > calls + 100, timeout=60,
                 what="more windows of the second process")
        assert stored(a.pid)[2] == {"spin_a"} and stored(b.pid)[2] == {"spin_b"}
    totals = json.loads(d.cli("status", "--format", "json").stdout)["totals"]
    assert int(totals["bpf_programs_shared"]) == 1 and int(totals["bpf_programs_built"]) == 1


ON_DEMAND = TARGET.parent / "launch_on_demand.py"


@pytest.mark.parametrize("gpu_mode", ["sampled", "exact"])
def test_launches_made_while_a_window_is_built_count_in_the_next(service_dir, stopped, gpu_mode: str) -> None:
    """Launches without pause across several window cuts: each window's counts leave the map before it is
    built, so the launches made during the build land in the next window. Clearing the map after the build
    lost them (the store then held fewer than were made). In both GPU modes of continuous_gpu_mode."""
    import grpc
    from test_gpu_api_cpu import cuda_runtime

    from deepctx.proto.v1 import deepctx_pb2 as pb
    from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc

    d = service_dir.continuous(continuous_window_s=1.0, continuous_scan_s=0.2, continuous_gpu_duty=1.0,
                          continuous_gpu_mode=gpu_mode)
    stopped.append(d)
    stub = pb_grpc.ProfilerStub(grpc.insecure_channel(f"unix:{d.socket}"))

    def windows() -> int:
        return stub.Status(pb.StatusRequest(), timeout=10).totals["continuous_windows"]

    t = StdinTarget([sys.executable, str(service_dir.linked(ON_DEMAND)), cuda_runtime()])
    try:
        wait_for(lambda: (session_of(d, t.pid) or {}).get("state") == "capturing", timeout=120,
                 what="the continuous capture of the GPU process")
        sent, first = 0, windows()
        while windows() < first + 3:  # bursts back to back until three windows were cut and built
            t.send("50")
            t.expect("done 50")
            sent += 50
        wait_for(lambda: launches_in_store(d, t.pid) >= sent, timeout=60, what="the launches in the store")
        assert launches_in_store(d, t.pid) == sent
        # every one of them under its Python line, in every window (stack ids stay valid across the cuts)
        doc = json.loads(d.cli("profile", "--pid", str(t.pid), "--since", "1h", "--format", "json").stdout)
        line = line_of(ON_DEMAND, "LINE_ON_DEMAND")
        under = sum(n["metrics"]["calls"] for anc, n in walk(doc) if n["kind"] == "kernel"
                    and any(a["kind"] == "python" and a["line"] == line for a in anc))
        assert under == sent
        assert doc["mode"] == gpu_mode
    finally:
        t.stop()


def test_gpu_probes_are_attached_for_their_share_of_each_window(service_dir, stopped) -> None:
    """continuous_gpu_duty 0.5 of 4 s windows: launches made while the probes are detached cost no trap and
    are not counted; those made while attached are, and the stored window scales them up to the window."""
    import grpc
    from test_gpu_api_cpu import cuda_runtime

    from deepctx.proto.v1 import deepctx_pb2 as pb
    from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc

    d = service_dir.continuous(continuous_window_s=4.0, continuous_scan_s=0.2, continuous_gpu_duty=0.5)
    stopped.append(d)
    stub = pb_grpc.ProfilerStub(grpc.insecure_channel(f"unix:{d.socket}"))

    def live(pid: int) -> dict[str, int]:
        for s in stub.Status(pb.StatusRequest(), timeout=10).sessions:
            if s.pid == pid and s.state == "capturing":
                return dict(s.stats)
        return {}

    t = StdinTarget([sys.executable, str(service_dir.linked(ON_DEMAND)), cuda_runtime()])
    try:
        wait_for(lambda: "gpu_probes_attached" in live(t.pid), timeout=120, what="the continuous capture")

        def burst(attached: int, n: int) -> int:
            """n launches inside one phase (the same phase and resume count before and after; a burst that
            straddles a switch is tried again); returns how many the probes counted."""
            while True:
                wait_for(lambda: live(t.pid)["gpu_probes_attached"] == attached, timeout=30,
                         what=f"probes attached={attached}")
                before = live(t.pid)
                t.send(str(n))
                t.expect(f"done {n}")
                after = live(t.pid)
                if (after["gpu_probes_attached"] == before["gpu_probes_attached"] == attached and
                        after["gpu_probe_resumes"] == before["gpu_probe_resumes"]):
                    return after["gpu_api_calls"] - before["gpu_api_calls"]

        assert burst(0, 50) == 0  # detached: no trap, not seen
        assert burst(1, 30) == 30  # attached: every one counted
        assert burst(0, 40) == 0
        assert live(t.pid)["gpu_probe_resumes"] >= 1  # detached, then attached again
        # the stored window holds the 30 calls scaled up by window / attached time (about 2x)
        wait_for(lambda: launches_in_store(d, t.pid) > 30, timeout=60, what="the scaled window in the store")
        assert launches_in_store(d, t.pid) <= 30 * 4.5 / 1.5  # a window of at most 4.5 s, 1.5 s or more attached
        doc = json.loads(d.cli("profile", "--pid", str(t.pid), "--since", "1h", "--format", "json").stdout)
        # merged over the windows: a share of their time (not a sum), about half
        assert 1.5 / 4.5 <= doc["stats"]["gpu_probe_duty_permille"] / 1000 <= 0.6, doc["stats"]
    finally:
        t.stop()


def test_device_activity_follows_the_duty_cycle(service_dir, stopped) -> None:
    """A process started with the CUPTI agent, picked up (it maps the CUDA libraries) before it starts CUDA,
    so before the agent is there: the capture attaches to the agent when it loads. While the probes are
    detached the agent lets CUPTI go (no callback, no record: the process pays nothing), while attached it
    reports again, and the stored window holds its device time."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "device"))
    from device_paths import AGENT, MOCKS, make_agents_and_mocks
    from device_paths import TARGET as MOCK_TARGET

    make_agents_and_mocks()
    if not AGENT.exists() or not (MOCKS / "libcupti.so.13").exists():
        import pytest

        pytest.skip("CUPTI headers not found (pip install nvidia-cuda-cupti): agent and mocks not built")
    import os

    d = service_dir.continuous(continuous_window_s=4.0, continuous_scan_s=0.2, continuous_gpu_duty=0.5)
    stopped.append(d)
    t = StdinTarget([sys.executable, str(service_dir.linked(MOCK_TARGET)), str(MOCKS), "--phases", "1000", "--late-init"],
                    env=dict(os.environ, CUDA_INJECTION64_PATH=str(AGENT)))

    def live() -> dict[str, int]:
        return {k: int(v) for k, v in ((session_of(d, t.pid) or {}).get("stats") or {}).items()}

    def phase() -> int:
        """One phase of work; whether the agent held CUPTI during it (the mock CUPTI's word)."""
        t.go()
        held = int(t.expect("cupti").split()[1])
        t.expect("done")
        return held

    try:
        # captured with the device probes waiting: the agent is not loaded yet (no site)
        wait_for(lambda: "device_usdt_sites" in live(), timeout=120, what="the continuous capture of the process")
        assert (live()["device_usdt_sites"], live()["device_agent_awaited"]) == (0, 1)
        t.go()  # cuInit: the driver loads the agent
        t.expect("initialized")
        wait_for(lambda: live().get("device_usdt_sites", 0) > 0, timeout=30, what="the agent's probes found")
        assert live()["device_agent_awaited"] == 0
        # detached: the agent stops within its watcher's tick (100 ms); phases until one ran without CUPTI
        wait_for(lambda: live().get("device_probes_attached") == 0, timeout=30, what="the device probes detached")
        wait_for(lambda: live().get("device_probes_attached") == 0 and phase() == 0, timeout=10,
                 what="a phase with the agent idle")
        # attached again: the agent reports
        wait_for(lambda: live().get("device_probe_resumes", 0) >= 1 and live().get("device_probes_attached") == 1,
                 timeout=30, what="the device probes attached again")
        wait_for(lambda: live().get("device_probes_attached") == 1 and phase() == 1, timeout=10,
                 what="a phase with the agent reporting")

        def stored_device_ns() -> int:
            r = d.cli("profile", "--pid", str(t.pid), "--since", "1h", "--format", "json")
            if r.returncode != 0:
                return 0
            return total(json.loads(r.stdout), "gpu_time_ns")

        wait_for(lambda: stored_device_ns() > 0, timeout=60, what="device time in the window store")
    finally:
        t.stop()
    assert d.alive()


def test_device_time_across_window_cuts_adds_up(service_dir, stopped) -> None:
    """Device records the agent hands over while a window is built count in the next window: over phases
    of the mock target back to back across three cuts, the stored windows hold every nanosecond of device
    time the BPF join counted (its running total, which no cut resets)."""
    import os

    import grpc

    from deepctx.proto.v1 import deepctx_pb2 as pb
    from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "device"))
    from device_paths import AGENT, MOCKS, cupti_mocks_built
    from device_paths import TARGET as MOCK_TARGET
    from test_device_join import TOTAL_NS

    if not cupti_mocks_built():
        pytest.skip("CUPTI headers not found (pip install nvidia-cuda-cupti): agent and mocks not built")
    d = service_dir.continuous(continuous_window_s=1.0, continuous_scan_s=0.2, continuous_gpu_duty=1.0)
    stopped.append(d)
    stub = pb_grpc.ProfilerStub(grpc.insecure_channel(f"unix:{d.socket}"))

    def windows() -> int:
        return stub.Status(pb.StatusRequest(), timeout=10).totals["continuous_windows"]

    def counted_ns() -> int:
        for s in stub.Status(pb.StatusRequest(), timeout=10).sessions:
            if s.pid == t.pid:
                return int(s.stats["device_time_ns"])
        return -1

    def stored_ns() -> int:
        r = d.cli("profile", "--pid", str(t.pid), "--since", "1h", "--format", "json")
        return total(json.loads(r.stdout), "gpu_time_ns") if r.returncode == 0 else -1

    def phase() -> int:
        """One phase of work; whether the agent held CUPTI during it (the mock CUPTI's word)."""
        t.go()
        held = int(t.expect("cupti").split()[1])
        t.expect("done")
        return held

    # the agent hands its records over at every tick of its watcher (10 ms): some arrive during each build
    t = StdinTarget([sys.executable, str(service_dir.linked(MOCK_TARGET)), str(MOCKS), "--phases", "1000000"],
                    env=dict(os.environ, CUDA_INJECTION64_PATH=str(AGENT), DEEPCTX_FLUSH_MS="1"))
    try:
        wait_for(lambda: (session_of(d, t.pid) or {}).get("state") == "capturing", timeout=120,
                 what="the continuous capture of the process")
        wait_for(lambda: phase() == 1, timeout=30, what="a phase with the agent reporting")
        phases, first = 0, windows()
        while windows() < first + 3:
            phase()
            phases += 1
        # the cuts took what was counted up to them; the rest is in the last window
        try:
            wait_for(lambda: counted_ns() >= phases * TOTAL_NS and stored_ns() == counted_ns(), timeout=60,
                     what="the device time counted, all in the store")
        except AssertionError as e:
            st = stub.Status(pb.StatusRequest(), timeout=10)
            mine = [(s.id, s.state, dict(s.stats)) for s in st.sessions if s.pid == t.pid]
            raise AssertionError(f"{e}: {phases} phases of {TOTAL_NS} ns, counted {counted_ns()}, stored "
                                 f"{stored_ns()}, totals {dict(st.totals)}; sessions {mine}; log tail "
                                 f"{d.log.read_text()[-3000:]}") from None
    finally:
        t.stop()
