"""Attach-time injection (ptrace-driven dlopen, no debugger): into a running process that never asked
for the agent; and clear refusals, with the target left running and finishing normally every time."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import pytest
from capture_util import run_capture
from device_paths import TARGET
from harness import StdinTarget, wait_for

from deepctx.daemon.errors import FailedPrecondition
from deepctx.daemon.inject import agent as agent_injector
from deepctx.daemon.inject import ptrace
from deepctx.daemon.inject.agent import check_injectable, inject_agent
from deepctx.host import procfs
from deepctx.host.process_handle import ProcessHandle
from deepctx.probes.device_activity import DEV_AGENT_IDLE, DeviceActivity, agent_mappings

sys.path.insert(0, str(TARGET.parent))
import mock_target as mt  # noqa: E402


def start(lib: Path, *args: str, env: dict[str, str] | None = None) -> StdinTarget:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"} | (env or {})
    return StdinTarget([sys.executable, str(TARGET), str(lib), *args], env=env)


def finishes_normally(t: StdinTarget) -> None:
    """The target still does its work and exits 0 once its stdin closes."""
    t.go()
    t.expect("cupti")
    t.expect("done")
    assert t.proc.stdin is not None
    t.proc.stdin.close()
    assert t.proc.wait(timeout=30) == 0


def inject(pid: int, agent: Path) -> None:
    with ProcessHandle.open(pid) as h:
        inject_agent(h, str(agent)).close()


def agent_state(pid: int) -> int:
    """deepctx_agent_state in the target (DEV_AGENT_*), read from its memory."""
    from deepctx.daemon.inject.agent import _data_address

    maps = procfs.read_maps(pid)
    path = agent_mappings(maps)[0].path
    addr = _data_address(pid, maps, path, "deepctx_agent_state")
    assert addr is not None
    with procfs.ProcessMemory(pid) as mem:
        return int.from_bytes(mem.read(addr, 4), "little", signed=True)


def kernel_times(r) -> dict[str, int]:  # noqa: ANN001
    kernels: dict[str, int] = {}
    for p, v in r.tree.paths_with("gpu_time_ns"):
        kernels[p[-1].name] = kernels.get(p[-1].name, 0) + v
    return kernels


@pytest.mark.parametrize("finalize", ["1", "0"], ids=["cuptiFinalize (default)", "unsubscribe only"])
def test_injected_agent_gives_exact_device_times(built: tuple[Path, Path], finalize: str) -> None:
    agent, lib = built
    t = start(lib, "--phases", "3", env={"DEEPCTX_CUPTI_FINALIZE": finalize})
    expected = {"mock_matmul(float*, int)": mt.N_MATMUL * mt.MATMUL_NS + mt.N_GRAPH * 2 * mt.MATMUL_NS,
                "mock_relu(float*)": mt.N_RELU * mt.RELU_NS + mt.N_GRAPH * mt.RELU_NS}
    try:
        assert not agent_mappings(procfs.read_maps(t.pid))
        dev = DeviceActivity(inject=True, agent_path=str(agent), injector=agent_injector)

        def work() -> None:
            t.go()
            assert t.expect("cupti").split()[1] == "1"  # the agent holds CUPTI while watched
            t.expect("done")

        r = run_capture(t.pid, work, dev, python=False)
        assert dev.injected and agent_mappings(procfs.read_maps(t.pid))
        assert r.stats["device_records_unknown_correlation"] == 0
        kernels = kernel_times(r)
        assert {k: kernels[k] for k in expected} == expected
        # detached: the agent goes idle and lets CUPTI go; with DEEPCTX_CUPTI_FINALIZE=1 finalized (CUPTI's
        # dynamic detach) in the exit callback of the phase's first call; the job runs on
        wait_for(lambda: agent_state(t.pid) == DEV_AGENT_IDLE, what="the agent going idle")
        t.go()
        subscribed, _callbacks, finalized = t.expect("cupti").split()[1:]
        assert (subscribed, finalized) == ("0", finalize)
        t.expect("done")
        # attached again after the finalize: CUPTI subscribed afresh, its clock again the agent's (exact times)
        again = DeviceActivity(inject=True, agent_path=str(agent), injector=agent_injector)
        r = run_capture(t.pid, work, again, python=False)
        assert not again.injected  # loaded already: the probes found it
        kernels = kernel_times(r)
        assert {k: kernels[k] for k in expected} == expected
        assert t.proc.stdin is not None
        t.proc.stdin.close()
        assert t.proc.wait(timeout=30) == 0
    finally:
        t.stop()


def test_refuses_without_a_cuda_context(built: tuple[Path, Path]) -> None:
    agent, lib = built
    t = start(lib, "--no-init")  # libcuda loaded, cuInit never called
    try:
        with pytest.raises(FailedPrecondition, match="no CUDA context yet"):
            inject(t.pid, agent)
        finishes_normally(t)
    finally:
        t.stop()


def test_refuses_when_another_profiler_holds_cupti(built: tuple[Path, Path]) -> None:
    agent, lib = built
    t = start(lib, "--hold-cupti")
    try:
        with pytest.raises(FailedPrecondition, match="CUPTI is held by another profiler"):
            inject(t.pid, agent)
        finishes_normally(t)
    finally:
        t.stop()


def test_refuses_when_ptrace_is_not_permitted(built: tuple[Path, Path]) -> None:
    """Another tracer (here: this test, as a debugger would be) holds the process."""
    agent, lib = built
    t = start(lib)
    try:
        ptrace.seize(t.pid)  # this thread becomes its tracer; the process keeps running
        try:
            with pytest.raises(ValueError, match="ptrace is not permitted.*already traced"):
                check_injectable(t.pid)
            with pytest.raises(FailedPrecondition, match="ptrace is not permitted"):
                inject(t.pid, agent)
        finally:
            ptrace.interrupt(t.pid)
            ptrace.wait(t.pid)
            ptrace.detach(t.pid)
        finishes_normally(t)
    finally:
        t.stop()


def test_refuses_a_process_without_cuda(built: tuple[Path, Path]) -> None:
    agent, _ = built
    t = StdinTarget([sys.executable, "-c", "import os,sys; print('ready', os.getpid(), flush=True); "
                     "sys.stdin.readline(); print('done', flush=True)"])
    try:
        with pytest.raises(ValueError, match="no CUDA context yet"):
            DeviceActivity(inject=True, agent_path=str(agent), injector=agent_injector).prepare(
                __import__("deepctx.probes.family", fromlist=["Target"]).Target(
                    t.pid, procfs.process_info(t.pid), procfs.AddressSpace(procfs.read_maps(t.pid))))
        t.go()
        t.expect("done")
    finally:
        t.stop()


def test_the_borrowed_thread_is_restored(built: tuple[Path, Path]) -> None:
    """A remote call leaves registers and vector state exactly as they were."""
    from deepctx.daemon.inject.remote import RemoteThread

    _, lib = built
    t = start(lib)
    try:
        getpid = ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0
        maps = procfs.read_maps(t.pid)
        from deepctx.daemon.inject.agent import _symbol_address

        addr = _symbol_address(t.pid, maps, lambda b: b.startswith("libc.so"), {"getpid"})["getpid"]
        assert getpid  # (this process's libc, only to be sure the symbol exists)
        # "ready" is printed just before the target blocks reading stdin: borrow the thread once it is
        # in read(2) (syscall 0), so both borrows find it in the same place
        def blocked_in_read() -> bool:
            return open(f"/proc/{t.pid}/syscall").read().split()[0] == "0"

        wait_for(blocked_in_read, what="the target blocked in read")
        with RemoteThread(t.pid, t.pid) as rt:
            before = bytes(rt.saved), rt.xstate
            assert rt.call(addr) == t.pid
            assert rt.call(addr) == t.pid
        # released, the thread restarts its read: borrowed again once it is back in it (under load it
        # can still be on its way, with other registers)
        wait_for(blocked_in_read, what="the target blocked in read again")
        with RemoteThread(t.pid, t.pid) as rt:
            assert (bytes(rt.saved), rt.xstate) == before
        finishes_normally(t)
    finally:
        t.stop()
