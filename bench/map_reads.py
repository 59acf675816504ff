"""Reading a BPF hash map of device-count-sized entries, bcc's batch read (then bytes()) against
probes/maps.raw_items, side by side in one run (root, no GPU needed).

    sudo .venv/bin/python bench/map_reads.py [--entries 47000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import ctypes as ct
import time
import warnings

from deepctx.probes import maps
from deepctx.probes.device_activity import DevKey, DevVal


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=47_000)  # a sampled ResNet-50 capture's dev_counts (H200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)  # bcc's str-vs-bytes table names
    from bcc import BPF

    src = (f"struct k {{ u64 id; char rest[{ct.sizeof(DevKey) - 8}]; }}; struct v {{ char b[{ct.sizeof(DevVal)}]; }};"
           f"BPF_HASH(m, struct k, struct v, {max(args.entries, 1) * 2});")
    bpf = BPF(text=src)
    t = bpf["m"]
    keys, values = (t.Key * args.entries)(), (t.Leaf * args.entries)()
    for i in range(args.entries):
        keys[i].id = i + 1
    t.items_update_batch(keys, values)
    for r in range(args.rounds):
        s = time.perf_counter()
        a = [(bytes(k), bytes(v)) for k, v in maps.items(t)]
        bcc_s = time.perf_counter() - s
        s = time.perf_counter()
        b = maps.raw_items(t)
        raw_s = time.perf_counter() - s
        assert sorted(a) == sorted(b) and len(b) == args.entries
        print(f"round {r}: {args.entries} entries, bcc batch + bytes {bcc_s:.3f} s, raw_items {raw_s:.3f} s, "
              f"ratio {bcc_s / raw_s:.1f}")
    bpf.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
