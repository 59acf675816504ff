"""The files whose unwind tables deepctxd builds as it starts (daemon/service.py runtime_files): the
interpreter and the C/C++ runtime libraries it maps, executable mappings only, once each; not the daemon's
own large libraries (LLVM, bcc, gRPC, numpy), whose tables no GPU job needs."""

from __future__ import annotations

from deepctx.daemon.service import runtime_files
from deepctx.host.procfs import parse_maps

MAPS = """\
55d0c0000000-55d0c0100000 r--p 00000000 fd:01 100 /usr/bin/python3.11
55d0c0100000-55d0c0500000 r-xp 00100000 fd:01 100 /usr/bin/python3.11
7f0000000000-7f0000100000 r-xp 00028000 fd:01 200 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000300000 r-xp 00010000 fd:01 201 /usr/lib/x86_64-linux-gnu/libm.so.6
7f0000300000-7f0000400000 r-xp 00090000 fd:01 202 /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
7f0000400000-7f0000500000 r-xp 00001000 fd:01 203 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
7f0000500000-7f0000600000 r-xp 00002000 fd:01 204 /opt/conda/lib/libpython3.12.so.1.0
7f0000600000-7f0000700000 r-xp 00002000 fd:01 300 /usr/lib/x86_64-linux-gnu/libLLVM-15.so.1
7f0000700000-7f0000800000 r-xp 00002000 fd:01 301 /usr/lib/x86_64-linux-gnu/libbcc.so.0.29.1
7f0000800000-7f0000900000 r-xp 00002000 fd:01 302 /venv/lib/python3.11/site-packages/grpc/_cython/cygrpc.so
7f0000900000-7f0000a00000 r--p 00002000 fd:01 303 /usr/lib/x86_64-linux-gnu/libz.so.1.2.13
7f0000a00000-7f0000b00000 rw-p 00000000 00:00 0
7f0000b00000-7f0000b01000 r-xp 00000000 00:00 0 [vdso]
"""


def test_runtime_files_are_the_interpreter_and_runtime_libraries_mapped_executable() -> None:
    got = runtime_files(parse_maps(MAPS))
    assert [p for p, _, _ in got] == [
        "/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        "/opt/conda/lib/libpython3.12.so.1.0",
    ]  # libz is mapped read-only here: no code of it runs; LLVM, bcc, gRPC are the daemon's own
    assert got[0] == ("/usr/bin/python3.11", "fd:01", 100)
