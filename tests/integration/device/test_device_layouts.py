"""device_activity.h is the truth for the structs the agent, BPF and Python share: the ctypes mirrors
and constants must match what gcc makes of it (no root needed)."""

from __future__ import annotations

from pathlib import Path

from c_layout import c_values, struct_layout

from deepctx.probes import device_activity as da
from deepctx.probes import usdt

HEADER = '"device_activity.h"'


def test_structs_match_the_header(tmp_path: Path) -> None:
    pairs: dict[str, int] = {}
    for c_name, mirror in (("dev_record", da.DevRecord), ("dev_corr", da.DevCorr), ("dev_corr_slot", da.DevCorrSlot),
                           ("dev_key", da.DevKey), ("dev_val", da.DevVal), ("dev_name_key", da.DevNameKey),
                           ("dev_event", da.DevEvent), ("dev_flush", da.DevFlush), ("dev_span", da.DevSpan),
                           ("dev_config", da.DevConfig), ("dev_graph_key", da.DevGraphKey),
                           ("usdt_site", usdt.UsdtSite), ("usdt_site_key", usdt.UsdtSiteKey)):
        pairs |= struct_layout(c_name, mirror)
    assert c_values(tmp_path, [HEADER], list(pairs)) == list(pairs.values())


def test_constants_match_the_header(tmp_path: Path) -> None:
    pairs = {
        "DEV_KIND_KERNEL": da.DEV_KIND_KERNEL, "DEV_KIND_MEMCPY": da.DEV_KIND_MEMCPY,
        "DEV_KIND_MEMSET": da.DEV_KIND_MEMSET, "DEV_KIND_SYNC": da.DEV_KIND_SYNC, "DEV_BATCH": da.DEV_BATCH,
        "DEV_REC_F_GRAPH": da.DEV_REC_F_GRAPH, "DEV_REC_F_SAMPLED": da.DEV_REC_F_SAMPLED,
        "DEV_KEY_F_SAMPLED": da.DEV_KEY_F_SAMPLED, "DEV_STAT_SAMPLED": da.DEV_STAT_SAMPLED, "DEV_API_DOMAIN_SHIFT": da.DEV_API_DOMAIN_SHIFT,
        "DEV_KEY_F_UNKNOWN": da.DEV_KEY_F_UNKNOWN, "DEV_KEY_F_UNPROBED": da.DEV_KEY_F_UNPROBED,
        "DEV_KEY_F_GRAPH": da.DEV_KEY_F_GRAPH, "DEV_NAME_LEN": da.DEV_NAME_LEN, "DEV_EV_API": da.DEV_EV_API,
        "DEV_EV_RECORD": da.DEV_EV_RECORD, "DEV_API_UNPROBED": da.DEV_API_UNPROBED,
        "DEV_AGENT_OK": da.DEV_AGENT_OK, "DEV_AGENT_ACTIVE": da.DEV_AGENT_ACTIVE, "DEV_AGENT_IDLE": da.DEV_AGENT_IDLE,
        "DEV_AGENT_E_NO_CUDA": da.DEV_AGENT_E_NO_CUDA, "DEV_AGENT_E_NO_CUPTI": da.DEV_AGENT_E_NO_CUPTI,
        "DEV_AGENT_E_BUSY": da.DEV_AGENT_E_BUSY, "DEV_AGENT_E_CUPTI": da.DEV_AGENT_E_CUPTI,
        "DEV_AGENT_E_PENDING": da.DEV_AGENT_E_PENDING, "DEV_STAT__COUNT": da.DEV_STAT__COUNT,
        "DEV_STAT_UNKNOWN": da.DEV_STAT_UNKNOWN, "DEV_STAT_TIME_NS": da.DEV_STAT_TIME_NS,
        "DEV_STAT_GRAPH_PLACED": da.DEV_STAT_GRAPH_PLACED, "DEV_GRAPH_MADE_LABEL": da.DEV_GRAPH_MADE_LABEL,
        "USDT_MAX_ARGS": usdt.USDT_MAX_ARGS, "USDT_ARG_NONE": usdt.ARG_NONE, "USDT_ARG_REG": usdt.ARG_REG,
        "USDT_ARG_MEM": usdt.ARG_MEM, "USDT_ARG_CONST": usdt.ARG_CONST,
    }
    assert c_values(tmp_path, [HEADER], list(pairs)) == list(pairs.values())
    assert set(da.STAT_NAMES) == set(range(da.DEV_STAT__COUNT))


def test_the_injector_knows_the_agents_codes() -> None:
    from deepctx.daemon.inject import agent

    assert agent.DEV_AGENT_E_PENDING == da.DEV_AGENT_E_PENDING
    assert set(agent._MESSAGES) == {da.DEV_AGENT_E_NO_CUDA, da.DEV_AGENT_E_NO_CUPTI, da.DEV_AGENT_E_BUSY,
                                    da.DEV_AGENT_E_CUPTI}


def test_the_counts_struct_formats_decode_every_field_where_ctypes_reads_it() -> None:
    """bucket_of unpacks a counts entry with DEV_KEY_FORMAT / DEV_VAL_FORMAT: every field set to its own
    value, the bucket must hold what the ctypes mirrors (checked against the header above) read."""
    import ctypes as ct

    k, v, n = da.DevKey(), da.DevVal(), iter(range(1, 100))
    for struct_, fields in ((k.call, da.GpuKey._fields_), (k, da.DevKey._fields_[1:]), (v, da.DevVal._fields_)):
        for name, ctype in fields:
            if issubclass(ctype, ct.Array):
                getattr(struct_, name)[:] = [next(n) for _ in range(ctype._length_)]
            else:
                setattr(struct_, name, next(n))
    c = k.call
    want = da.DeviceBucket(c.pid, c.tid, c.user_stack, c.py_stack, c.api_id, c.object, c.stream, tuple(c.grid),
                           tuple(c.block), c.shared_mem, c.kind, c.flags, k.name, k.fn_name, k.device, k.kind,
                           k.copy_kind, k.flags, v.count, v.time_ns, v.bytes, c.origin_tid, c.origin_user_stack,
                           c.origin_py_stack, c.origin_label, c.origin_node, v.api_time_ns)
    assert da.bucket_of(bytes(k), da.DEV_VAL_FORMAT.unpack(bytes(v))) == want
    assert da.DEV_KEY_FORMAT.size == ct.sizeof(da.DevKey) and da.DEV_VAL_FORMAT.size == ct.sizeof(da.DevVal)
