"""The window store's age limit with no window coming: a daemon whose store holds a window past
store_max_age_s neither answers with it nor keeps it, though nothing is ever put, and counts its eviction."""

from __future__ import annotations

import json
import time

import store_producer as sp


def test_window_past_the_age_limit_is_gone_without_a_put(service_dir, stopped) -> None:
    now = time.time()
    old = sp.windows(now - 7200, 1, names=("h200_torch_ops",))  # ended 7140 s ago
    fresh = sp.windows(now - 600, 1, names=("h200_triton_kernel",))
    service_dir.put(old + fresh)  # a producer with the default limits (a week) keeps both
    d = service_dir.start(store_max_age_s=3600.0)  # no continuous mode: no window will come
    stopped.append(d)
    torch, triton = (sp.fixture(n)["pid"] for n in ("h200_torch_ops", "h200_triton_kernel"))
    r = d.cli("profile", "--pid", str(torch), "--since", "3h", "--format", "json")
    assert r.returncode == 1 and "no stored windows match" in r.stderr
    r = d.cli("profile", "--since", "3h", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["pid"], doc["stats"]["windows"]) == (triton, 1)
    r = d.cli("top", "--once", "--format", "json", "--since", "3h")
    assert r.returncode == 0, r.stderr
    top = json.loads(r.stdout)
    assert top["windows"] == 1 and [p["pid"] for p in top["processes"]] == [triton]
    totals = json.loads(d.cli("status", "--format", "json").stdout)["totals"]
    assert (int(totals["windows_put"]), int(totals["windows_evicted_age"])) == (2, 1)
