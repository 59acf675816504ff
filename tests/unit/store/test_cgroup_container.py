"""Container ids and cgroup paths from /proc/<pid>/cgroup, as runtimes write them."""

from __future__ import annotations

import os

import pytest

from deepctx.daemon.store.window import container_from_cgroup, container_of

ID = "4f1c2d3e" * 8


@pytest.mark.parametrize(("text", "expected"), [
    (f"0::/system.slice/docker-{ID}.scope\n", ID),
    (f"0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-{ID}.scope\n", ID),
    (f"0::/machine.slice/libpod-{ID}.scope/container\n", ID),
    (f"12:memory:/docker/{ID}\n0::/\n", ID),
    (f"0::/kubepods/besteffort/pod1234/{ID}\n", ID),
    ("0::/user.slice/user-1000.slice/session-2.scope\n", "/user.slice/user-1000.slice/session-2.scope"),
    ("9:name=systemd:/\n4:memory:/process_api/5c83985935f52b137d82ad922671e7b5\n0::/\n",
     "/process_api/5c83985935f52b137d82ad922671e7b5"),
    ("0::/\n", "/"),
    ("", "/"),
])
def test_container_from_cgroup(text: str, expected: str) -> None:
    assert container_from_cgroup(text) == expected


def test_live_and_gone_processes() -> None:
    with open(f"/proc/{os.getpid()}/cgroup") as f:
        assert container_of(os.getpid()) == container_from_cgroup(f.read())
    assert container_of(2**22 + 12345) == ""
