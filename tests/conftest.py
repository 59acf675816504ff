"""Shared fixtures: built native targets, tiers that skip cleanly where their needs are missing, and how the
tiers share workers when pytest-xdist runs them (`-n auto --dist loadgroup`, as `./install.sh test` does)."""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

# gRPC's fork support runs its atfork handlers in every child the tests fork (subprocess with user=/group= forks
# rather than vforks): CI once saw such a child, forked while the worker's gRPC threads were busy ("skipping
# fork() handlers"), die of SIGSEGV before its exec. The tests never use gRPC across a fork. Read by grpc when
# it is first imported, which comes after this module.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

TESTS = Path(__file__).resolve().parent
TARGETS = TESTS / "targets"
REPO = TESTS.parent
# Tests that measure rates, memory or calls against whatever else runs on the machine: `./install.sh test`
# runs them alone, after the rest (--alone-tests only), and the rest with xdist (--alone-tests without).
ALONE_FILES = {
    "integration/test_compile_pages.py",  # pages only this process maps: another process's compile shares them
    "integration/test_uprobe_links.py",  # its control probes libc for every process and counts their calls
    "integration/test_map_reads.py",  # processes calling without pause against takes, every call counted
    "integration/test_capture_exit.py",  # a target's exit raced against a re-attach
    "integration/test_gpu_duty.py",  # shares of each period, scaled by time
    "integration/device/test_device_busy.py",  # a mock GPU's busy time against NVML's samples
    "integration/device/test_device_duty.py",  # device time scaled by the recorded share
}
# How the tiers share xdist's workers (#34.8: the integration tier alone took 8.5 minutes on one worker of
# two). The GPU tier runs in one group (one worker, in its order): its tests share the GPU. The service and
# security folders run as a group each: they add users, run services and count a daemon's whole system calls.
# Every other integration file is a group of its own, beside the others: each test's daemon and probes are
# its own (a continuous daemon in a test profiles only its own targets: continuous_match), and what depends
# on the machine being quiet is in ALONE_FILES.
SERIAL_GROUP = "gpu-tier"
FOLDER_GROUPS = ("integration/service/", "integration/security/")


def is_root() -> bool:
    return os.geteuid() == 0


def xdist_group(rel: str) -> str:
    """SERIAL_GROUP for the GPU tier, a group per folder of FOLDER_GROUPS; else a group per file, so that a
    file's module fixtures are made once and its tests keep their order. rel: the file's path below tests/."""
    if rel.startswith("gpu/"):
        return SERIAL_GROUP
    return next((folder for folder in FOLDER_GROUPS if rel.startswith(folder)), rel)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadgroup, by xdist_group() of each test's file. xdist's own loadgroup reads xdist_group marks
    into the test ids, which pytest 9 no longer lets it change (Node.nodeid is made from Node._id), so
    every test would be scheduled alone. The biggest group goes first; a worker that holds it takes no
    second one until it is nearly done."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return xdist_group(path.removeprefix("tests/"))

    return TierScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker's temporary folders under pytest-N/gwK, not pytest-N/popen-gwK: the daemons' sockets
    live in tmp_path, with a private folder beside them, and a Unix socket's path has at most 107 bytes.
    Runs before the tmp_path plugin reads the option."""
    worker = getattr(config, "workerinput", None)
    if worker is not None and config.option.basetemp:
        base = Path(config.option.basetemp)
        if base.name == f"popen-{worker['workerid']}":
            config.option.basetemp = str(base.with_name(worker["workerid"]))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--alone-tests", choices=("with", "without", "only"), default="with",
                     help="the tests that must run alone (tests/conftest.py ALONE_FILES): run them with the "
                          "rest (default), leave them out, or run only them")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_root = pytest.mark.skip(reason="needs root and a kernel with BPF (integration tier)")
    alone = config.getoption("--alone-tests")
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        if "integration" in item.path.parts and not is_root():
            item.add_marker(skip_root)
        rel = item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""
        is_alone = rel in ALONE_FILES
        (kept if alone == "with" or is_alone == (alone == "only") else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on a folder (flock on its descriptor: no file left behind), for builds that two
    xdist workers could start at once."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@pytest.fixture(scope="session")
def native_targets() -> Path:
    """tests/targets/bin, built with make (frame pointers on, debug info kept); one worker builds at a time."""
    with folder_lock(TARGETS):
        subprocess.run(["make", "-s", "-C", str(TARGETS)], check=True)
    return TARGETS / "bin"


@pytest.fixture(autouse=True)
def no_daemon_outlives_its_test() -> Iterator[None]:
    """A daemon a test started and did not stop (it failed first) is stopped at the test's end; daemons of
    wider-scoped fixtures were started before this snapshot and are left to their fixture."""
    import harness

    since = len(harness.STARTED)
    yield
    harness.reap_daemons(since)
