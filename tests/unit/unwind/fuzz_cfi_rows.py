"""host/unwind/cfi_rows.c against the Python reference on damaged pieces of real .eh_frame sections, with the C
built under AddressSanitizer and UndefinedBehaviorSanitizer (not part of the suite: it needs the sanitizers'
runtimes preloaded). From the repository root:

    gcc -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -shared \\
        -fPIC -o /tmp/libcfi_asan.so host/unwind/cfi_rows.c
    LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0 \\
        .venv/bin/python tests/unit/unwind/fuzz_cfi_rows.py /tmp/libcfi_asan.so 6000 SEED

Prints how many pieces gave the same table both ways, how many differed (0 expected), and how many both refused.
A sanitizer report ends the process with it."""

from __future__ import annotations

import random
import sys

from deepctx.host.elf.reader import ElfFile
from deepctx.host.unwind import native_rows
from deepctx.host.unwind.arch import X86_64
from deepctx.host.unwind.table import _Builder

SOURCES = ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6")


def damaged(rng: random.Random, data: bytes) -> bytes:
    """A piece of data (512 B to 32 KiB) damaged in up to 12 places: bytes, 4-byte words, and LEB128 numbers
    past 64 bits."""
    start = rng.randrange(0, max(1, len(data) - 4096)) if rng.random() < 1 / 3 else 0
    m = bytearray(data[start:start + rng.choice((512, 4096, 32768))])
    for _ in range(rng.randint(1, 12)):
        at = rng.randrange(len(m))
        r = rng.random()
        if r < 0.3:
            m[at:at + 9] = bytes([0xFF] * 8 + [0x01])
        elif r < 0.5:
            m[at:at + 4] = rng.randrange(1 << 32).to_bytes(4, "little")
        else:
            m[at] = rng.randrange(256)
    return bytes(m)


def main(library: str, n: int, seed: int) -> int:
    native_rows.LIBRARY = library  # type: ignore[assignment]
    assert native_rows.library() is not None, library
    srcs = []
    for p in SOURCES:
        with ElfFile(p) as f:
            srcs.append((bytes(f.section_data(".eh_frame") or b""), f.sections[".eh_frame"].addr))
    rng = random.Random(seed)
    same = differ = refused = 0
    for _ in range(n):
        data, addr = rng.choice(srcs)
        m = damaged(rng, data)
        is_eh = rng.random() < 0.8
        out: list[object] = []
        for native in (False, True):
            b = _Builder(X86_64, path="fuzz", native=native)
            try:
                b.add_section(0, bytes(m), addr, is_eh, None)
                t = b.finish(None)
                out.append((t.base, t.pcs.tobytes(), t.infos.tobytes(), tuple(t.rules), t.stats.get("errors")))
            except Exception as e:  # noqa: BLE001  (what each side refused with is compared)
                out.append(type(e).__name__)
        if isinstance(out[0], str) and out[0] == out[1]:
            refused += 1
        elif out[0] == out[1]:
            same += 1
        else:
            differ += 1
    print(f"same {same}, differ {differ}, both refused {refused}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
