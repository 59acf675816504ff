"""The checks on the descriptor a target hands over for the agent (daemon/inject/memfd.py), on memfds of
this process: only a fresh, unsealed memfd is filled, and only a sealed file holding exactly the agent is
accepted (issue #29, findings 1 and 2). No root needed."""

from __future__ import annotations

import fcntl
import mmap
import os
import tempfile
from collections.abc import Iterator

import pytest

from deepctx.daemon.inject import memfd
from deepctx.daemon.symbolize.native import module_name
from deepctx.host.procfs import Mapping
from deepctx.probes.device_activity import agent_mappings, is_agent

AGENT = b"\x7fELF" + bytes(range(256)) * 5000  # 1.28 MB: more than one write chunk


@pytest.fixture
def fresh() -> Iterator[int]:
    fd = os.memfd_create("libdeepctx_cupti.so", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    yield fd
    os.close(fd)


def test_a_fresh_memfd_is_filled_sealed_and_checked(fresh: int) -> None:
    sealed = memfd.fill_and_seal(fresh, AGENT)
    assert sealed.fd == fresh and sealed.path == f"/proc/self/fd/{fresh}"
    assert fcntl.fcntl(fresh, fcntl.F_GET_SEALS) & memfd.SEALS == memfd.SEALS
    with open(sealed.path, "rb") as f:
        assert f.read() == AGENT
    with pytest.raises(PermissionError):  # sealed: nobody changes it now, the target included
        os.pwrite(fresh, b"x", 0)
    with pytest.raises(PermissionError):
        os.ftruncate(fresh, 0)
    st = os.fstat(fresh)
    assert (sealed.st_dev, sealed.st_ino) == (st.st_dev, st.st_ino)
    assert sealed.maps_dev == f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"


def test_a_file_with_content_is_refused(fresh: int) -> None:
    os.write(fresh, b"planted")
    with pytest.raises(memfd.Refused, match="changed before the agent was written"):
        memfd.fill_and_seal(fresh, AGENT)


def test_a_memfd_already_sealed_is_refused() -> None:
    fd = os.memfd_create("libdeepctx_cupti.so", os.MFD_CLOEXEC)  # no sealing allowed: F_SEAL_SEAL set
    try:
        with pytest.raises(memfd.Refused, match="changed before"):
            memfd.fill_and_seal(fd, AGENT)
    finally:
        os.close(fd)


def test_a_file_on_disk_is_refused() -> None:
    with tempfile.TemporaryFile(dir="/tmp") as f:  # unlinked, but not a memfd (no seals)
        with pytest.raises(memfd.Refused, match="not a memory file"):
            memfd.fill_and_seal(f.fileno(), AGENT)
    with tempfile.NamedTemporaryFile(dir="/tmp") as f:  # linked
        with pytest.raises(memfd.Refused, match="not a memory file"):
            memfd.fill_and_seal(f.fileno(), AGENT)


def test_a_writable_shared_mapping_blocks_the_seal(fresh: int) -> None:
    """The target mapped it shared and writable (it could change the agent after our check): refused."""
    real = fcntl.fcntl
    held: list[mmap.mmap] = []

    def map_then_seal(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_ADD_SEALS and not held:
            held.append(mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
        return real(fd, cmd, arg)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(memfd.fcntl, "fcntl", map_then_seal)
        with pytest.raises(memfd.Refused, match="could not be sealed .*busy"):
            memfd.fill_and_seal(fresh, AGENT)
    held[0].close()


def test_a_write_between_ours_and_the_seal_is_caught(fresh: int) -> None:
    """The target writes through its own descriptor after ours and before the seal: the sealed content is
    not the agent's, refused."""
    other = os.open(f"/proc/self/fd/{fresh}", os.O_RDWR)  # the target's own descriptor of the file
    real = fcntl.fcntl

    def write_then_seal(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_ADD_SEALS:
            os.pwrite(other, b"\x90" * 16, 4096)
        return real(fd, cmd, arg)

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(memfd.fcntl, "fcntl", write_then_seal)
            with pytest.raises(memfd.Refused, match="changed the agent's memory file while it was written"):
                memfd.fill_and_seal(fresh, AGENT)
    finally:
        os.close(other)


def test_pidfd_getfd_duplicates_the_same_file(fresh: int) -> None:
    pidfd = os.pidfd_open(os.getpid())
    try:
        dup = memfd.pidfd_getfd(pidfd, fresh)
        with pytest.raises(OSError, match="pidfd_getfd: Bad file descriptor"):
            memfd.pidfd_getfd(pidfd, 1 << 20)
    finally:
        os.close(pidfd)
    try:
        a, b = os.fstat(fresh), os.fstat(dup)
        assert (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) and dup != fresh
        assert not os.get_inheritable(dup)
    finally:
        os.close(dup)


def test_the_injected_agents_mapping_is_recognized() -> None:
    """/proc/PID/maps names the injected agent /memfd:libdeepctx_cupti.so (deleted): still the agent for a
    later capture, and its frames still belong to module libdeepctx_cupti.so."""
    m = Mapping(0x7F0000000000, 0x7F0000010000, "r-xp", 0x1000, "00:01", 4242, "/memfd:libdeepctx_cupti.so (deleted)")
    assert is_agent(m.path) and agent_mappings([m]) == [m]
    assert module_name(m) == "libdeepctx_cupti.so"
    assert not is_agent("/memfd:something-else (deleted)")
