"""Resource limits against a user (issue #29, findings 6 and 8, and the unwind cache of 13), each attack
run as a user made for the test against a real deepctxd whose socket everyone can reach:

- Health/Watch streams held open on one connection and on several: the user gets max_rpcs_per_user of
  them, the rest RESOURCE_EXHAUSTED naming that limit; root's `status` and `attach` are served meanwhile.
- a zlib bomb as a library's .debug_frame, mapped by the user's process that the user profiles: refused
  before it is inflated (the daemon's peak RSS barely moves), the profile names the file and the cap.
- a user's library with the build id of root's: each gets its own unwind table in the shared cache.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Daemon, Target, wait_for
from service_env import ServiceDir
from users import as_user, cli_as

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "unwind"))
from test_file_limits import SRC_A, SRC_B, compressed_debug_frame, zeros_bomb

PER_USER = 8  # max_rpcs_per_user's default
# Opens Health/Watch streams, CONNS connections with PER_CONN each, waits for each one's first answer or
# error, prints the outcomes as JSON, and holds the open ones until its stdin closes.
ATTACKER = """
import json, sys
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
sock, conns, per_conn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out, held = [], []
for c in range(conns):
    ch = grpc.insecure_channel("unix:" + sock, options=[("grpc.use_local_subchannel_pool", 1)])
    stub = health_pb2_grpc.HealthStub(ch)
    for _ in range(per_conn):
        call = stub.Watch(health_pb2.HealthCheckRequest())
        try:
            next(call)
            out.append("ok")
            held.append(call)
        except grpc.RpcError as e:
            out.append(e.code().name + ": " + e.details())
print(json.dumps(out), flush=True)
sys.stdin.read()
"""
HOLDER = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (!dlopen(argv[1], RTLD_NOW)) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    printf("ready\n"); fflush(stdout);
    char c; while (read(0, &c, 1) > 0) {}
    return 0;
}
"""


@pytest.fixture
def home(user: pwd.struct_passwd) -> Iterator[Path]:
    """A folder of the user's own under /tmp, removed after the test."""
    p = Path(tempfile.mkdtemp(prefix="deepctx-sec-", dir="/tmp"))
    os.chown(p, user.pw_uid, user.pw_gid)
    os.chmod(p, 0o755)
    yield p
    shutil.rmtree(p, ignore_errors=True)


def attack(u: pwd.struct_passwd, d: Daemon, script: Path, conns: int, per_conn: int) -> subprocess.Popen:
    return subprocess.Popen([*as_user(u), sys.executable, str(script), d.socket, str(conns), str(per_conn)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def outcomes(p: subprocess.Popen) -> list[str]:
    assert p.stdout is not None
    line = p.stdout.readline()  # the attacker prints once every stream has its answer
    assert line, "the attacker ended without reporting"
    return json.loads(line)


def test_a_users_streams_are_bounded_and_root_is_served(service_dir: ServiceDir, stopped: list[Daemon],
                                                        user: pwd.struct_passwd, other_user: pwd.struct_passwd,
                                                        native_targets: Path, home: Path) -> None:
    d = service_dir.start(max_sessions=16, max_user_rpcs=12)
    stopped.append(d)
    script = home / "watch.py"
    script.write_text(ATTACKER)
    # 24 streams on one connection (the review's attack), then 3 connections of 4 more
    one = attack(user, d, script, 1, 24)
    several = None
    try:
        got = outcomes(one)
        assert got[:PER_USER] == ["ok"] * PER_USER
        refusal = (f"RESOURCE_EXHAUSTED: too many requests in progress for uid {user.pw_uid}: at most {PER_USER} "
                   f"at once per user (max_rpcs_per_user), streams held open included; end one and retry")
        assert got[PER_USER:] == [refusal] * (24 - PER_USER)
        several = attack(user, d, script, 3, 4)
        assert outcomes(several) == [refusal] * 12
        # another user: what is left of max_user_rpcs (12 - 8), then the limit for all users
        other = attack(other_user, d, script, 2, 3)
        try:
            assert outcomes(other) == ["ok"] * 4 + [
                "RESOURCE_EXHAUSTED: too many requests in progress for users other than root: at most 12 at "
                "once (max_user_rpcs); retry later"] * 2
            # root, meanwhile: status and a capture
            r = d.cli("status", "--format", "json", timeout=30)
            assert r.returncode == 0, r.stderr
            with Target([str(native_targets / "cpu_burner"), "30"]) as t:
                doc = d.attach_json(t.pid, "--duration", "1")
                assert doc["pid"] == t.pid and doc["stats"]["cpu_samples"] > 0
        finally:
            other.communicate(timeout=30)
        r = cli_as(user, d, "status", timeout=30)  # the user's own request: over its limit too
        assert r.returncode != 0 and "max_rpcs_per_user" in r.stderr
    finally:
        for p in (one, several):
            if p is not None:
                p.communicate(timeout=30)
    # streams ended: the user's slots come back
    wait_for(lambda: cli_as(user, d, "status", timeout=30).returncode == 0, 20, "the user's slots released")
    log = d.log.read_text()
    assert log.count("rpc refused: too many requests in progress for uid") == 1  # once, not per refusal
    assert "Traceback" not in log


def vm_hwm_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1))


def test_a_zlib_bomb_in_a_users_library_is_refused_before_it_is_inflated(
        service_dir: ServiceDir, stopped: list[Daemon], user: pwd.struct_passwd, home: Path) -> None:
    (home / "bomb.c").write_text(SRC_A)
    lib = home / "libbomb.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(home / "bomb.c")], check=True)
    bomb = 900 << 20  # its zlib stream is under 1 MB: the old daemon inflated it in its own memory
    compressed_debug_frame(lib, bomb, zeros_bomb(bomb))
    assert lib.stat().st_size < 1 << 20
    (home / "holder.c").write_text(HOLDER)
    holder = home / "holder"
    subprocess.run(["gcc", "-o", str(holder), str(home / "holder.c"), "-ldl"], check=True)
    for p in home.iterdir():
        os.chown(p, user.pw_uid, user.pw_gid)
    d = service_dir.start()
    stopped.append(d)
    before = vm_hwm_kb(d.proc.pid)
    with subprocess.Popen([*as_user(user), str(holder), str(lib)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as t:
        try:
            assert t.stdout is not None and t.stdout.readline() == "ready\n"
            r = cli_as(user, d, "attach", str(t.pid), "--duration", "1", "--format", "json", "--quiet")
            assert r.returncode == 0, r.stderr
            doc = json.loads(r.stdout)
        finally:
            t.communicate(timeout=30)
    growth_mb = (vm_hwm_kb(d.proc.pid) - before) / 1024
    assert growth_mb < 150, f"the daemon's peak RSS grew by {growth_mb:.0f} MB"
    want = (f"native stacks: {lib}: section .debug_frame is {bomb} bytes once decompressed, over the cap of "
            f"{256 << 20} bytes (max_decompressed_bytes): refused")
    assert [w for w in doc["warnings"] if "max_decompressed_bytes" in w] == [want]
    assert d.alive()


def test_a_users_library_with_roots_build_id_does_not_poison_roots_table(
        service_dir: ServiceDir, stopped: list[Daemon], user: pwd.struct_passwd, home: Path) -> None:
    """The user's file is captured first; root's, with the same build id and other CFI, later: the disk
    cache holds two tables, and a fresh daemon reading root's from disk gets root's own."""
    bid = "c0ffee" * 6
    (home / "holder.c").write_text(HOLDER)
    holder = home / "holder"
    subprocess.run(["gcc", "-o", str(holder), str(home / "holder.c"), "-ldl"], check=True)
    libs = {}
    for who, src in (("user", SRC_B * 1), ("root", SRC_A)):
        (home / f"{who}.c").write_text(src)
        libs[who] = home / f"lib{who}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-Wl,--build-id=0x{bid}", "-o", str(libs[who]),
                        str(home / f"{who}.c")], check=True)
    for p in home.iterdir():
        os.chown(p, user.pw_uid, user.pw_gid)
    d = service_dir.start()
    stopped.append(d)
    cache = service_dir.path / "cache" / "unwind"
    for who, prefix in (("user", as_user(user)), ("root", [])):
        with subprocess.Popen([*prefix, str(holder), str(libs[who])], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) as t:
            try:
                assert t.stdout is not None and t.stdout.readline() == "ready\n"
                r = (cli_as(user, d, "attach", str(t.pid), "--duration", "1", "--quiet") if who == "user"
                     else d.cli("attach", str(t.pid), "--duration", "1", "--quiet"))
                assert r.returncode == 0, r.stderr
            finally:
                t.communicate(timeout=30)
    from deepctx.host.unwind.disk import load_table
    from deepctx.host.unwind.table import build_table
    tables = [load_table(p, None) for p in cache.glob("*.npz")]
    want = {who: build_table(str(lib)).pcs.tolist() for who, lib in libs.items()}
    found = [t.pcs.tolist() for t in tables]
    assert want["user"] != want["root"] and want["user"] in found and want["root"] in found
    assert (os.stat(cache).st_mode & 0o777) == 0o700
