"""The GPU API table against the real libraries' symbol tables, and the tree's apportioning of counts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deepctx.daemon.gpu_tree import apportion
from deepctx.host import gpu_apis
from deepctx.host.elf.symbols import ElfSymbols


def nm_dynamic(path: str) -> dict[str, int]:
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWi":
            syms.setdefault(parts[2].split("@")[0], int(parts[0], 16))
    return syms


def libraries() -> list[tuple[str, str]]:
    found = []
    try:
        import nvidia

        for base in nvidia.__path__:
            found += [("cudart", str(p)) for p in sorted(Path(base).glob("cu*/lib/libcudart.so.*"))[:1]]
    except ImportError:
        pass
    hip = Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5")
    if hip.exists():
        found.append(("hip", str(hip)))
    return found


@pytest.mark.parametrize(("kind", "path"), libraries())
def test_table_symbols_resolve_like_nm(kind: str, path: str) -> None:
    wanted = {a.symbol for _, a in gpu_apis.BY_LIBRARY[kind]}
    got = ElfSymbols(path).addresses_of(wanted)
    ref = nm_dynamic(path)
    assert got == {name: ref[name] for name in wanted if name in ref}
    # the entry points every test and user relies on exist in the real libraries
    prefix = "cuda" if kind == "cudart" else "hip"
    for must in ("LaunchKernel", "Malloc", "Memcpy", "MemcpyAsync", "DeviceSynchronize", "StreamSynchronize"):
        assert prefix + must in got


def test_suffix_shared_names_resolve() -> None:
    """Linkers store "cudaLaunchKernel" as the tail of "__cudaLaunchKernel": lookups must find it."""
    libs = [p for k, p in libraries() if k == "cudart"]
    if not libs:
        pytest.skip("nvidia-cuda-runtime not installed")
    ref = nm_dynamic(libs[0])
    assert "__cudaLaunchKernel" in ref or "__cudaLaunchKernel_ptsz" in ref
    assert ElfSymbols(libs[0]).addresses_of({"cudaLaunchKernel"}) == {"cudaLaunchKernel": ref["cudaLaunchKernel"]}


def test_every_library_kind_has_launch_copy_and_sync() -> None:
    for kind in ("cudart", "cuda", "hip"):
        classes = {a.cls for _, a in gpu_apis.BY_LIBRARY[kind]}
        assert {gpu_apis.LAUNCH, gpu_apis.MEMCPY, gpu_apis.MEMSET, gpu_apis.SYNC, gpu_apis.ALLOC} <= classes
    assert {a.symbol for _, a in gpu_apis.BY_LIBRARY["nccl"]} >= {"ncclAllReduce", "ncclSend", "ncclRecv"}


@pytest.mark.parametrize(("total", "weights", "want"), [
    (10, [1, 1], [5, 5]),
    (10, [1, 2], [3, 7]),
    (7, [1, 1, 1], [3, 2, 2]),
    (0, [3, 4], [0, 0]),
    (5, [0, 0], [0, 0]),
    (1000, [1], [1000]),
])
def testapportion_keeps_totals_exact(total: int, weights: list[int], want: list[int]) -> None:
    got = apportion(total, weights)
    assert got == want
    if sum(weights):
        assert sum(got) == total


def test_kernel_names_from_handle_strings() -> None:
    from deepctx.daemon.gpu_tree import name_from_handle_strings

    torch_like = ["", "_ZN2at6native29vectorized_elementwise_kernelILi4E", "", "", "", ""]
    assert name_from_handle_strings(torch_like, runtime_stub=True) == torch_like[1]
    assert name_from_handle_strings(["\x01\x02", "my_c_kernel", ""], runtime_stub=True) == "my_c_kernel"
    # driver handles: only a mangled name is trusted (other strings near an opaque struct may be anything)
    assert name_from_handle_strings(["my_c_kernel"], runtime_stub=False) is None
    assert name_from_handle_strings(["has space", "a", "1abc"], runtime_stub=True) is None
