"""Kernel addresses to frames through /proc/kallsyms (root sees real addresses)."""

from __future__ import annotations

import bisect
from pathlib import Path

from deepctx.host.frames import Frame


class KernelSymbols:
    def __init__(self, path: str = "/proc/kallsyms") -> None:
        entries = []
        for line in Path(path).read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                addr = int(parts[0], 16)
                if addr:
                    entries.append((addr, parts[2]))
        entries.sort()
        self._addrs = [a for a, _ in entries]
        self._names = [n for _, n in entries]

    def symbolize(self, addr: int) -> Frame:
        i = bisect.bisect_right(self._addrs, addr) - 1
        name = self._names[i] if i >= 0 else f"{addr:#x}"
        return Frame("native", name, module="[kernel]")

    def symbolize_stack(self, ips_leaf_first: list[int]) -> list[Frame]:
        return [self.symbolize(ip) for ip in reversed(ips_leaf_first)]
