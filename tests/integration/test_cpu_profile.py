"""End to end on real eBPF: deepctxd samples a native target and names its hot path exactly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness import DEEPCTX, Target, start_daemon, stop_daemon
from profile_paths import self_paths, total, value_under_chain


def test_hot_loop_under_outer_in_json(daemon, native_targets: Path) -> None:
    with Target([str(native_targets / "cpu_burner"), "30"]) as t:
        doc = daemon.attach_json(t.pid, "--duration", "3")
    assert doc["schema"] == "deepctx.profile/v1" and doc["pid"] == t.pid and doc["ended"] == "duration"
    assert doc["sample_hz"] == 99
    n = total(doc)
    # One busy thread at 99 Hz for 3 s: about 297 samples (the CI machine may steal some).
    assert 100 <= n <= 320, n
    under = value_under_chain(doc, ["main", "outer", "hot_loop"])
    assert under >= 0.8 * n, (under, n)
    hot = [p for p, _ in self_paths(doc) if p[-1]["name"] == "hot_loop"]
    assert hot and all(p[-1]["kind"] == "native" and p[-1]["module"] == "cpu_burner" for p in hot)
    assert all(p[0]["kind"] == "thread" and p[0]["tid"] == t.pid for p in hot)
    assert doc["stats"]["cpu_samples"] >= n


def test_sleeping_thread_takes_no_samples(daemon, native_targets: Path) -> None:
    with Target([str(native_targets / "cpu_burner"), "30"]) as t:
        doc = daemon.attach_json(t.pid, "--duration", "2")
    tids = {c["tid"] for c in doc["root"]["children"]}
    assert tids == {t.pid}


def test_tree_output_has_percentages(daemon, native_targets: Path) -> None:
    with Target([str(native_targets / "cpu_burner"), "30"]) as t:
        r = daemon.cli("attach", str(t.pid), "--duration", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "hot_loop" in ln]
    assert len(lines) == 1 and "%" in lines[0]
    pct = float(lines[0].split("%")[0].split()[-1])
    assert pct >= 80.0


def test_two_targets_at_once(daemon, native_targets: Path) -> None:
    import concurrent.futures as cf

    with Target([str(native_targets / "cpu_burner"), "30"]) as a, Target([str(native_targets / "cpu_burner"), "30"]) as b:
        with cf.ThreadPoolExecutor(2) as pool:
            fa = pool.submit(daemon.attach_json, a.pid, "--duration", "2")
            fb = pool.submit(daemon.attach_json, b.pid, "--duration", "2")
            da, db = fa.result(), fb.result()
    for doc, t in ((da, a), (db, b)):
        assert doc["pid"] == t.pid
        assert {c["tid"] for c in doc["root"]["children"]} == {t.pid}
        assert value_under_chain(doc, ["outer", "hot_loop"]) >= 0.8 * total(doc)


def test_target_in_another_mount_namespace(daemon, native_targets: Path, tmp_path: Path) -> None:
    """The binary lives on a mount only the target's namespace has: symbols come through /proc/<pid>/root."""
    script = tmp_path / "run.sh"
    script.write_text("mount -t tmpfs none /mnt && cp \"$1\" /mnt/nsburner && exec /mnt/nsburner 30\n")
    with Target(["unshare", "--mount", "--propagation", "private", "sh", str(script),
                 str(native_targets / "cpu_burner")]) as t:
        assert not Path("/mnt/nsburner").exists()
        doc = daemon.attach_json(t.pid, "--duration", "2")
    assert value_under_chain(doc, ["main", "outer", "hot_loop"]) >= 0.8 * total(doc)
    assert {p[-1]["module"] for p, _ in self_paths(doc) if p[-1]["name"] == "hot_loop"} == {"nsburner"}


def test_kernel_stacks_on_request(daemon, tmp_path: Path) -> None:
    """A process busy in the kernel (reading /dev/zero) shows kernel frames below its syscall."""
    dd = shutil.which("dd")
    assert dd
    script = tmp_path / "k.sh"
    script.write_text(f'echo "ready $$"; exec {dd} if=/dev/zero of=/dev/null bs=1M count=100000000\n')
    with Target(["sh", str(script)]) as t:
        doc = daemon.attach_json(t.pid, "--duration", "2", "--kernel-stacks")
    kernel = [p for p, _ in self_paths(doc) if p[-1]["module"] == "[kernel]"]
    assert kernel, "no kernel frames recorded"
    assert sum(v for p, v in self_paths(doc) if p[-1]["module"] == "[kernel]") >= 0.5 * total(doc)


def test_sigterm_ends_captures_and_exits_cleanly(tmp_path: Path, native_targets: Path) -> None:
    import json
    import os

    d = start_daemon(tmp_path)
    with Target([str(native_targets / "cpu_burner"), "60"]) as t:
        client = subprocess.Popen([*DEEPCTX, "attach", str(t.pid), "--duration",
                                   "60", "--format", "json", "--quiet"], env=d.env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        from harness import wait_for

        def capturing() -> bool:
            sessions = json.loads(d.cli("status", "--format", "json").stdout).get("sessions") or []
            return any(s["state"] == "capturing" for s in sessions)

        wait_for(capturing, what="capture running", timeout=120)
        rc = stop_daemon(d)
        out, err = client.communicate(timeout=60)
    assert rc == 0
    assert client.returncode == 0, err
    doc = json.loads(out)
    assert doc["ended"] == "daemon_shutdown"
    assert any("shutting down" in w for w in doc["warnings"])
    assert not os.path.exists(d.socket)
    assert '"msg": "signal received, detaching probes"' in d.log.read_text()
