"""Programs compiled once (#30.1), on real eBPF: a second capture of its kind compiles and loads nothing, what
each capture asks for (GPU call-path mode, kernel stacks) takes effect on the one loaded program, and a program
compiled as the daemon starts serves the first capture. Counts are the daemon's Status totals."""

from __future__ import annotations

import base64
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import (
    Daemon,
    StdinTarget,
    Target,
    cuda_runtime,
    profile_phase,
    session_of,
    start_daemon,
    stop_daemon,
    wait_for,
)
from profile_paths import self_paths, total, walk

RUNTIME_CALLS = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "runtime_calls.py"
N_LAUNCH = 11 + 2 * 4  # runtime_calls.py's cudaLaunchKernel calls (host stubs and kernel handles)
N_CALLS = 7 + N_LAUNCH + 3 + 5  # with its cudaMalloc, cudaMemcpy and cudaDeviceSynchronize calls


def totals(d: Daemon) -> dict[str, int]:
    r = d.cli("status", "--format", "json")
    assert r.returncode == 0, r.stderr
    return {k: int(v) for k, v in json.loads(r.stdout)["totals"].items()}  # int64 map values come as strings


def inclusive(node: dict, metric: str) -> int:
    return node["metrics"].get(metric, 0) + sum(inclusive(c, metric) for c in node["children"])


def launches(doc: dict) -> int:
    return sum(inclusive(n, "calls") for _, n in walk(doc) if n["kind"] == "api" and n["name"] == "cudaLaunchKernel")


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon of its own: its counters start at zero (no programs compiled ahead)."""
    d = start_daemon(tmp_path)
    yield d
    assert stop_daemon(d) == 0, d.log.read_text()[-4000:]


def test_second_capture_compiles_nothing_and_takes_its_own_mode(fresh: Daemon) -> None:
    lib = cuda_runtime()
    first = profile_phase(fresh, StdinTarget([sys.executable, str(RUNTIME_CALLS), "cuda", lib]), "--mode", "sampled")
    after_first = totals(fresh)
    assert after_first["bpf_programs_built"] == 1 and after_first["captures_served"] == 1
    assert after_first["bpf_programs_loaded"] >= 2  # the sampler's and the GPU probes' functions
    # the host cache's counters beside them (host/file_cache.py, host_cache_*): the target's files were read
    assert after_first["host_cache_budget_bytes"] == 64 << 20 and after_first["host_cache_entries"] >= 1
    assert after_first["host_cache_builds"] == sum(v for k, v in after_first.items()
                                                   if k.startswith("host_cache_builds_"))
    # another process of the same program (warm), another mode: the same loaded program, its mode from a map
    second = profile_phase(fresh, StdinTarget([sys.executable, str(RUNTIME_CALLS), "cuda", lib]), "--mode", "exact")
    # the release runs behind the profile: wait until the program is given back
    wait_for(lambda: totals(fresh).get("bpf_programs_idle") == 1, what="the program given back", timeout=60)
    after = totals(fresh)
    assert after["bpf_programs_built"] == 1 and after["bpf_programs_loaded"] == after_first["bpf_programs_loaded"]
    assert after["bpf_programs_reused"] == 1 and after["captures_served"] == 2
    assert after["host_cache_hits"] > after_first["host_cache_hits"]  # the second process's files were held
    assert (first["mode"], second["mode"]) == ("sampled", "exact")
    assert launches(first) == launches(second) == N_LAUNCH  # sampled mode's counts stay exact
    # exact mode on the program the sampled capture configured: every call's path, and the counters started
    # from zero again (the maps were emptied between the captures)
    s1, s2 = first["stats"], second["stats"]
    assert s2["gpu_api_calls_with_call_path"] == s2["gpu_api_calls"] == s1["gpu_api_calls"] == N_CALLS
    assert s1["gpu_api_calls_with_call_path"] <= s1["gpu_api_calls"]


def test_captures_at_once_share_one_program_and_each_profile_holds_its_own_calls(fresh: Daemon) -> None:
    """Two attaches at once (a job's ranks) attach to one loaded program: the second compiles nothing, each
    profile holds exactly its own process's calls, and once both end the program goes back emptied and
    serves the next capture."""
    import concurrent.futures as cf

    lib = cuda_runtime()
    extra = {0: 0, 1: 22}  # more launches in the second: a profile that held the other's would show
    ts = [StdinTarget([sys.executable, str(RUNTIME_CALLS), "cuda", lib, "--launches", str(11 + n)])
          for n in extra.values()]
    with cf.ThreadPoolExecutor(2) as pool:
        futs = [pool.submit(fresh.attach_json, t.pid, "--duration", "300", "--mode", "exact") for t in ts]
        wait_for(lambda: all((session_of(fresh, t.pid) or {}).get("state") == "capturing" for t in ts),
                 what="both captures running", timeout=180)
        mid = totals(fresh)
        for t in ts:
            t.go()
        for t in ts:
            t.expect("done")
        docs = []
        for t, f in zip(ts, futs, strict=True):  # the first built while the second still captures
            r = fresh.cli("stop", str(t.pid))
            assert r.returncode == 0, r.stderr
            docs.append(f.result())
    for t in ts:
        t.stop()
    assert mid["bpf_programs_built"] == 1 and mid["bpf_programs_shared"] == 1, mid
    for i, doc in enumerate(docs):
        assert doc["pid"] == ts[i].pid and doc["ended"] == "stopped"
        assert launches(doc) == N_LAUNCH + extra[i]
        s = doc["stats"]  # its own samples, every one in its tree or counted dropped (the second joined)
        assert s["cpu_samples"] == s["cpu_samples_in_profile"] + s["cpu_samples_dropped_map_full"]
    assert docs[0]["stats"]["program_captures"] == 2  # built while the other capture was on its program
    wait_for(lambda: totals(fresh).get("bpf_programs_idle") == 1, what="the program given back", timeout=60)
    third = profile_phase(fresh, StdinTarget([sys.executable, str(RUNTIME_CALLS), "cuda", lib]), "--mode", "exact")
    assert launches(third) == N_LAUNCH and "program_captures" not in third["stats"]
    assert totals(fresh)["bpf_programs_built"] == 1


def test_kernel_stacks_follow_each_capture_on_one_program(fresh: Daemon, tmp_path: Path) -> None:
    """--kernel-stacks used to be a -D of the sampler: now a flag of the target's entry in its map."""
    dd = shutil.which("dd")
    assert dd
    script = tmp_path / "k.sh"
    script.write_text(f'echo "ready $$"; exec {dd} if=/dev/zero of=/dev/null bs=1M count=100000000\n')

    def kernel_share(*args: str) -> tuple[int, int]:
        with Target(["sh", str(script)]) as t:
            doc = fresh.attach_json(t.pid, "--duration", "2", *args)
        return sum(v for p, v in self_paths(doc) if p[-1]["module"] == "[kernel]"), total(doc)

    with_k, n1 = kernel_share("--kernel-stacks")
    compiled = totals(fresh)["bpf_programs_built"]
    without_k, n2 = kernel_share()
    assert with_k >= 0.5 * n1 and n2 > 0
    assert without_k == 0  # the same program, asked for no kernel stacks this time
    assert totals(fresh)["bpf_programs_built"] == compiled == 1


def test_program_compiled_at_start_serves_the_first_capture(tmp_path: Path) -> None:
    d = start_daemon(tmp_path, "--prewarm")
    try:
        # two programs: a Python process with a GPU runtime, and one without
        wait_for(lambda: totals(d).get("bpf_programs_idle") == 2, what="programs compiled ahead", timeout=300)
        before = totals(d)
        assert before["bpf_programs_built"] == 2 and before["captures_served"] == 0
        # the maps' kernel memory, outside the RSS: the unwind rows (16 M x 8 bytes) and page index (2 M
        # entries at an 8-byte stride) once, the daemon's, shared by both programs (probes/unwind_maps.py;
        # each program had its own: 438 MB in all), and the rest of both programs' maps (about 150 MB)
        rows_and_pages = (1 << 24) * 8 + (1 << 21) * 8
        assert rows_and_pages < before["bpf_map_bytes"] < rows_and_pages + (256 << 20)
        assert before["bpf_maps"] > 2 * 20
        doc = profile_phase(d, StdinTarget([sys.executable, str(RUNTIME_CALLS), "cuda", cuda_runtime()]), "--mode", "exact")
        after = totals(d)
        assert launches(doc) == N_LAUNCH
        assert after["bpf_programs_built"] == 2 and after["bpf_programs_reused"] == 1
        assert after["bpf_programs_loaded"] == before["bpf_programs_loaded"]  # loaded at start: attached only
    finally:
        assert stop_daemon(d) == 0, d.log.read_text()[-4000:]


def test_a_daemon_stopped_while_it_compiles_ahead_exits_cleanly(tmp_path: Path) -> None:
    """Stopped a second after it started, deepctxd once died of SIGSEGV: its exit ran LLVM's static destructors
    under the compile in flight. It now ends without them, status 0, and says so."""
    d = start_daemon(tmp_path, "--prewarm")
    # stopped once a compile is in flight (a stop before it began, on a loaded machine, compiled nothing)
    wait_for(lambda: totals(d)["bpf_programs_building"] > 0 or totals(d)["bpf_programs_built"] == 2,
             what="a program compiling ahead", timeout=60)
    compiled = totals(d)["bpf_programs_built"] == 2
    rc = stop_daemon(d)
    log = d.log.read_text()
    assert rc == 0, log[-4000:]
    if compiled:  # both compiles were over before the stop (a fast machine): nothing in flight to test
        pytest.skip("the programs were compiled before the daemon could be stopped")
    assert "exiting while programs compile ahead" in log and '"msg": "stopped"' in log
    assert not Path(d.socket).exists()


def test_a_released_program_is_emptied_without_reading_its_values() -> None:
    """reset_maps: hashes emptied and counters zeroed before the next capture, by key: read out with their
    values, the native unwinder's 32 KiB process entries took 256 MB of buffers (deepctxd's peak memory)."""
    import ctypes as ct

    from deepctx.probes import compose
    from deepctx.probes.cpu_sampler import CpuSampler, SamplerTarget
    from deepctx.probes.native_unwind import NativeUnwinder
    from deepctx.probes.programs import reset_maps

    def peak_mb() -> int:
        line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("VmHWM"))
        return int(line.split()[1]) // 1024

    bpf = compose.compile_program([NativeUnwinder(cache=object()), CpuSampler(99)])  # type: ignore[arg-type]
    try:
        procs, targets, stats = bpf[b"native_procs"], bpf[b"targets"], bpf[b"cpu_stats"]
        for pid in range(1, 40):
            procs[ct.c_uint32(pid)] = procs.Leaf()
        for pid in range(1, 1000):
            targets[ct.c_uint32(pid)] = SamplerTarget(1)
        stats[ct.c_int(0)] = stats.Leaf(*([7] * len(stats.Leaf())))
        before = peak_mb()
        reset_maps(bpf)
        assert (len(list(procs.keys())), len(list(targets.keys())), sum(stats[ct.c_int(0)])) == (0, 0, 0)
        assert peak_mb() - before < 32
    finally:
        compose.cleanup_program(bpf)


def test_a_restarted_daemon_loads_its_programs_from_disk(tmp_path: Path) -> None:
    """The compiled program's code kept in cache_dir/programs (probes/program_cache.py): a second daemon compiles
    only its maps and loads the code from the file, and its capture counts every call under its path; a cached
    program the kernel refuses is compiled instead, and the file written again from that compile."""
    cache = tmp_path / "cache"
    cfg = tmp_path / "d.toml"
    cfg.write_text(f'cache_dir = "{cache}"\n')
    lib = cuda_runtime()

    def capture() -> tuple[dict, dict[str, int], str]:
        d = start_daemon(tmp_path, "--config", str(cfg))  # one after the other, in one folder (a short socket path)
        try:
            doc = profile_phase(d, StdinTarget([sys.executable, str(RUNTIME_CALLS), "cuda", lib]), "--mode", "exact")
            t = totals(d)
        finally:
            assert stop_daemon(d) == 0, d.log.read_text()[-4000:]
        return doc, t, d.log.read_text()

    def exact(doc: dict) -> None:
        assert launches(doc) == N_LAUNCH
        assert doc["stats"]["gpu_api_calls_with_call_path"] == doc["stats"]["gpu_api_calls"] == N_CALLS

    doc, t, _ = capture()
    exact(doc)
    assert (t["bpf_programs_compiled"], t["bpf_programs_from_disk"], t["bpf_programs_cached"]) == (1, 0, 1)
    files = list((cache / "programs").iterdir())
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
    assert (cache / "programs").stat().st_mode & 0o777 == 0o700
    saved = files[0].read_bytes()
    assert sorted(json.loads(saved)["functions"]) == ["on_cpu_sample", "on_gpu_api_entry", "on_gpu_api_return",
                                                      "on_gpu_api_session", "on_gpu_api_session_return"]

    doc, t, log = capture()
    exact(doc)
    assert (t["bpf_programs_compiled"], t["bpf_programs_from_disk"], t["bpf_programs_built"]) == (0, 1, 1)
    assert '"from_disk": true' in log

    # every function an exit alone (the verifier refuses: R0 is never set), in a file of the right format and key
    bad = json.loads(saved)
    bad["functions"] = {n: base64.b64encode(bytes([0x95, 0, 0, 0, 0, 0, 0, 0])).decode() for n in bad["functions"]}
    bad["relocs"] = {n: [] for n in bad["relocs"]}
    files[0].write_text(json.dumps(bad))
    doc, t, log = capture()
    exact(doc)
    assert (t["bpf_programs_cache_refused"], t["bpf_programs_compiled"], t["bpf_programs_from_disk"]) == (1, 1, 0)
    assert "cached program refused: compiling it" in log
    assert files[0].read_bytes() == saved  # written again from the compile: the same code, fds left out
