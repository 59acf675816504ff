"""Decoding the CUPTI agent's pcs messages (probes/pc_sampling.py) without BPF: what the ring buffer hands
over, including messages a bad or foreign agent could send."""

from __future__ import annotations

import ctypes as ct
import struct

from deepctx.probes import pc_sampling as pcs

RECORD = struct.Struct("<QQQIIII")


def cubin_chunk(crc: int, size: int, offset: int, data: bytes) -> bytes:
    return bytes(pcs.PcsCubinHead(crc, size, offset, 7, 0)) + data


def test_records_sum_per_pc_and_stall() -> None:
    d = pcs.PcsData()
    d.add_message(pcs.PCS_MSG_RECORDS, RECORD.pack(9, 0x10, 1, 11, 3, 0, 0) + RECORD.pack(9, 0x10, 1, 11, 2, 0, 0)
                  + b"\x01\x02")  # a trailing partial record is ignored
    d.add_message(pcs.PCS_MSG_NAME, struct.pack("<Q", 1) + b"_Z5saxpyfPKfPfi")
    d.add_message(pcs.PCS_MSG_STALL, struct.pack("<Q", 11) + b"smsp__pcsamp_warps_issue_stalled_long_scoreboard")
    assert dict(d.samples) == {(1, 9, 0x10, 11): 5}
    assert d.names == {1: "_Z5saxpyfPKfPfi"} and d.stalls[11].endswith("long_scoreboard")
    assert d.messages == 3


def test_a_cubin_is_assembled_from_chunks_in_any_order() -> None:
    d = pcs.PcsData()
    d.add_message(pcs.PCS_MSG_CUBIN, cubin_chunk(5, 6, 3, b"def"))
    assert not d.cubins[5].complete
    d.add_message(pcs.PCS_MSG_CUBIN, cubin_chunk(5, 6, 0, b"abc"))
    assert d.cubins[5].complete and bytes(d.cubins[5].data) == b"abcdef" and d.cubins[5].module == 7


def test_bad_cubin_messages_are_dropped() -> None:
    d = pcs.PcsData()
    d.add_message(pcs.PCS_MSG_CUBIN, cubin_chunk(5, 4, 2, b"xyz"))  # past the announced size
    d.add_message(pcs.PCS_MSG_CUBIN, cubin_chunk(6, pcs.MAX_CUBIN_BYTES + 1, 0, b"x"))  # too large to assemble
    d.add_message(pcs.PCS_MSG_CUBIN, b"short")
    assert d.cubins == {}


def test_status_and_device() -> None:
    d = pcs.PcsData()
    d.add_message(pcs.PCS_MSG_STATUS, bytes(pcs.PcsStatus(pcs.PCS_E_UNSUPPORTED, 0, 0, 0, 0)) + b"not supported")
    dev = pcs.PcsDevice(0, 132, 9, 0)
    dev.name = b"NVIDIA H200"
    d.add_message(pcs.PCS_MSG_DEVICE, bytes(dev))
    failure = d.failure()
    assert failure is not None and failure.text == "not supported"
    assert d.device == {"name": "NVIDIA H200", "sm_count": 132, "compute_capability": "9.0"}
    assert ct.sizeof(pcs.PcsEvent) == 16 + pcs.PCS_DATA


def test_options_from_the_environment() -> None:
    env = {"DEEPCTX_PC_SAMPLING": "1", "DEEPCTX_PC_KERNEL": "(gemm", "DEEPCTX_PC_PERIOD": "9"}
    o = pcs.PcsOptions.from_environment(env.get)
    assert o == pcs.PcsOptions(kernel=r"\(gemm", period=9, duration_ms=0)  # a bad regex set by hand: literal
    assert o.matches("(gemm_kernel)") and not o.matches("gemm")
    assert pcs.PcsOptions.from_environment({}.get) is None
