"""Each rule on synthetic profiles: the finding it makes (place, evidence, estimate) when the problem is there,
and none on the fixed shape of the same program. 1 CPU sample = 1 ms (sample_hz 1000)."""

from __future__ import annotations

from typing import Any

import pytest
from analyzer_docs import ADD, BF16_GEMM, MUL, SGEMM, TANH, TRAIN, DocBuilder, frame, lib, nat, py

from deepctx.profiles.analyzer import Limits, analyze

MS = 1_000_000
MAIN = [py("main", 10)]


def findings(doc: dict[str, Any], rule: str, **limits: float) -> list[dict[str, Any]]:
    a = analyze(doc, Limits(**limits) if limits else None, [rule])
    return [f.to_json() for f in a.findings]


def status(doc: dict[str, Any], rule: str) -> tuple[str, str | None]:
    r = analyze(doc, rules=[rule]).rules[0]
    return r.status, r.reason


def at(f: dict[str, Any]) -> tuple[str | None, int | None, str | None]:
    loc = f["location"]
    return loc["file"], loc["line"], loc["function"]


# --- 2. launch-bound loop ------------------------------------------------------------------------------

def launch_loop(calls: int, grid: tuple[int, int, int], gpu_ns_each: int = 0) -> dict[str, Any]:
    b = DocBuilder()
    loop = MAIN + [py("step", 20)]
    b.cpu(loop, 100)
    b.launch(loop, MUL, calls, 50 * MS, gpu_ns_each * calls, grid=grid, operator="mul")
    return b.doc


def test_launch_bound_fires_on_many_tiny_launches_from_one_line() -> None:
    [f] = findings(launch_loop(10_000, (1, 1, 1)), "launch-bound-loop")
    assert at(f) == (TRAIN, 20, "step")
    assert f["call_path"] == [f"main ({TRAIN}:10)", f"step ({TRAIN}:20)"]
    ev = f["evidence"]
    assert ev["launches"] == 10_000 and ev["one_wave_launches"] == 10_000
    assert ev["host_time_ns"] == 150 * MS and ev["host_per_launch_ns"] == 15_000
    assert ev["kernels"] == [{"kernel": "at::native::vectorized_elementwise_kernel<…>", "launches": 10_000}]
    # T = 100 ms of Python + 50 ms in cudaLaunchKernel; R = 10000 x (15 - 2) µs = 130 ms
    assert f["estimated_speedup"] == 7.5 and f["confidence"] == 0.5


def test_launch_bound_names_the_operators_behind_the_launches() -> None:
    """With operator nodes on the path (#33.1), the evidence names them, most launches first; without them
    (test above) it has no "operators" entry."""
    b = DocBuilder()
    loop = MAIN + [py("step", 20)]
    b.cpu(loop, 100)
    b.launch(loop + [frame("op", "aten::mul.Tensor", module="libtorch_cuda.so")], MUL, 6_000, 30 * MS)
    b.launch(loop + [frame("op", "aten::add_.Tensor", module="libtorch_cuda.so")], ADD, 4_000, 20 * MS)
    [f] = findings(b.doc, "launch-bound-loop")
    assert f["evidence"]["operators"] == [{"operator": "aten::mul.Tensor", "launches": 6_000},
                                          {"operator": "aten::add_.Tensor", "launches": 4_000}]
    assert "operators" not in findings(launch_loop(10_000, (1, 1, 1)), "launch-bound-loop")[0]["evidence"]


def test_launch_bound_with_gpu_time_compares_kernel_and_launch() -> None:
    [f] = findings(launch_loop(10_000, (1, 1, 1), gpu_ns_each=3_000), "launch-bound-loop")
    assert f["evidence"]["gpu_per_launch_ns"] == 3_000
    assert f["estimated_speedup"] == 5.0 and f["confidence"] == 0.8  # R = 10000 x 12 µs of T = 150 ms


def launch_evidence_with(in_call: int, in_probes: int = 0) -> dict[str, Any]:
    """launch-bound-loop's evidence at a line of 100 ms of Python and 10,000 launches timed at 50 ms in all,
    with in_call samples (ms) in the launches' own code and in_probes in deepctx's probes at them."""
    b = DocBuilder()
    loop = MAIN + [py("step", 20)]
    b.cpu(loop, 100)
    b.cpu(loop, in_call, inside="cudaLaunchKernel")
    if in_probes:
        b.add(b.main + loop + [nat("cudaLaunchKernel", "libcudart.so.13"), nat("[deepctx probe]", None)],
              cpu_samples=in_probes)
    b.launch(loop, MUL, 10_000, 50 * MS)
    [f] = findings(b.doc, "launch-bound-loop")
    return f["evidence"]


def test_launch_bound_takes_the_time_inside_launches_from_their_samples() -> None:
    """Exact mode's measured launch time holds deepctx's traps: with enough CPU samples in the launches' own
    code (not in `[deepctx probe]`), the lesser of the two gives the time inside the calls, and the evidence
    says how much of the measured time was left out as deepctx's; with fewer than 20, the measured time
    stands, and so it does where it is the lesser (the agent's timing, which leaves CUPTI's callbacks out)."""
    ev = launch_evidence_with(20, in_probes=70)
    assert ev["host_time_ns"] == 120 * MS and ev["host_per_launch_ns"] == 12_000  # 100 ms + 20 ms sampled
    assert ev["probe_time_removed_ns"] == 30 * MS  # of the 50 ms measured
    for in_call in (19, 60):
        ev = launch_evidence_with(in_call)
        assert ev["host_time_ns"] == 150 * MS and "probe_time_removed_ns" not in ev, in_call


def test_launch_bound_not_on_few_launches_or_long_kernels() -> None:
    assert findings(launch_loop(10, (16384, 1, 1)), "launch-bound-loop") == []  # the batched version
    assert findings(launch_loop(10_000, (16384, 1, 1)), "launch-bound-loop") == []  # big grids: not tiny
    assert findings(launch_loop(10_000, (1, 1, 1), gpu_ns_each=20_000), "launch-bound-loop") == []


# --- 17. unfused optimizer ------------------------------------------------------------------------------

def optimizer_loop(impl: str, launches: int = 6_400, gpu_ns_each: int = 0, file: str = "optim/adam.py") -> dict[str, Any]:
    """A training step whose optimizer.step() (train.py:20) runs torch.optim's impl: 100 ms of Python in it and
    launches of 10 µs each."""
    b = DocBuilder()
    cls = "AdamW" if "adam" in impl else "RMSprop"
    step = MAIN + [py("step", 20), lib(f"{cls}.step", 200, "optim/adamw.py" if cls == "AdamW" else file),
                   lib(impl.split("_")[-1], 900, file), lib(impl, 400, file)]
    b.cpu(step, 100)
    b.launch(step, MUL, launches, launches * 10_000, gpu_ns_each * launches, operator="mul")
    return b.doc


def test_unfused_optimizer_points_at_the_step_and_names_the_fused_optimizer() -> None:
    doc = optimizer_loop("_single_tensor_adam")
    [f] = findings(doc, "unfused-optimizer")
    assert at(f) == (TRAIN, 20, "step")
    ev = f["evidence"]
    assert (ev["launches"], ev["optimizer"], ev["implementation"]) == (6_400, "adam", "_single_tensor_adam")
    assert ev["host_time_ns"] == 164 * MS and ev["host_per_launch_ns"] == 25_625
    # T = 100 ms of Python + 64 ms in cudaLaunchKernel; R = 6400 x (25.625 - 2) µs = 151.2 ms
    assert f["estimated_speedup"] == pytest.approx(164 / (164 - 151.2), abs=0.01) and f["confidence"] == 0.5
    # AdamW's update runs in adam.py: the class comes from its step frame
    assert "(torch.optim.AdamW(params, ..., fused=True))" in f["suggestion"]
    # the generic advice (batch the loop, CUDA graphs) stays out of it
    assert findings(doc, "launch-bound-loop") == []


def test_unfused_optimizer_with_gpu_time_and_the_foreach_path() -> None:
    [f] = findings(optimizer_loop("_multi_tensor_adam", launches=640, gpu_ns_each=5_000), "unfused-optimizer")
    assert f["evidence"]["implementation"] == "_multi_tensor_adam" and f["evidence"]["gpu_per_launch_ns"] == 5_000
    assert f["confidence"] == 0.8 and "fused=True" in f["suggestion"]


def test_unfused_optimizer_quiet_when_fused_or_gpu_bound_or_nothing_better() -> None:
    assert findings(optimizer_loop("_fused_adam", launches=100), "unfused-optimizer") == []
    # update kernels that outlast their launch: the GPU sets the pace
    assert findings(optimizer_loop("_single_tensor_adam", gpu_ns_each=40_000), "unfused-optimizer") == []
    assert findings(optimizer_loop("_single_tensor_adam", launches=50), "unfused-optimizer") == []
    # RMSprop has no fused implementation: foreach is the fix for its per-parameter loop, and its foreach path is
    # left to the generic rule
    [f] = findings(optimizer_loop("_single_tensor_rmsprop", file="optim/rmsprop.py"), "unfused-optimizer")
    assert "foreach=True" in f["suggestion"] and "fused" not in f["suggestion"]
    foreach = optimizer_loop("_multi_tensor_rmsprop", file="optim/rmsprop.py")
    assert findings(foreach, "unfused-optimizer") == [] and len(findings(foreach, "launch-bound-loop")) == 1


# --- 3. sync in a loop -----------------------------------------------------------------------------------

def item_loop(item_calls: int) -> dict[str, Any]:
    b = DocBuilder()
    b.cpu(MAIN + [py("train", 30), py("prep", 40)], 200)  # host-only work: builds the next batch
    b.cpu(MAIN + [py("train", 31)], 10)
    b.launch(MAIN + [py("train", 31)], BF16_GEMM, 100, 1 * MS, grid=(16, 32, 1), api="cuLaunchKernelEx")
    b.copy(MAIN + [py("train", 32)], "DtoH", item_calls, 4 * item_calls, 1 * MS)
    b.sync(MAIN + [py("train", 32)], item_calls, 150 * MS)
    return b.doc


def test_sync_in_loop_fires_on_item_every_step() -> None:
    [f] = findings(item_loop(100), "sync-in-loop")
    assert at(f) == (TRAIN, 32, "train")
    ev = f["evidence"]
    assert (ev["syncs"], ev["sync_wait_ns"], ev["mean_wait_ns"]) == (100, 150 * MS, 1_500_000)
    assert ev["apis"] == {"cudaStreamSynchronize": 100}
    assert (ev["reads_to_host"], ev["bytes_read"], ev["overlappable_host_ns"]) == (100, 400, 200 * MS)
    assert ".item()" in f["suggestion"]
    # T = 210 ms CPU + 152 ms in GPU calls = 362 ms; R = min(150 ms wait, 200 ms host-only) = 150 ms
    assert f["estimated_speedup"] == round(362 / 212, 2) == 1.71


def test_sync_in_loop_not_on_one_read_after_the_loop() -> None:
    assert findings(item_loop(1), "sync-in-loop") == []


def test_sync_in_loop_gain_is_bounded_by_host_work_to_overlap() -> None:
    b = DocBuilder()
    b.cpu(MAIN + [py("train", 31)], 10)
    b.launch(MAIN + [py("train", 31)], BF16_GEMM, 100, 1 * MS, grid=(16, 32, 1))
    b.sync(MAIN + [py("train", 32)], 100, 150 * MS, api="cudaDeviceSynchronize", target="device")
    assert findings(b.doc, "sync-in-loop") == []  # GPU-bound, no host-only work: nothing to overlap
    [f] = findings(b.doc, "sync-in-loop", min_speedup=1.0)
    assert f["estimated_speedup"] == 1.0 and f["evidence"]["overlappable_host_ns"] == 0
    assert "torch.cuda.synchronize()" in f["suggestion"]


def test_sync_in_loop_counts_data_loading_as_work_to_overlap() -> None:
    doc = loader_loop(LOADER, 300)
    b = DocBuilder()
    b.doc = doc
    b.copy(MAIN + [py("train", 83)], "DtoH", 100, 400, 1 * MS)
    b.sync(MAIN + [py("train", 83)], 100, 200 * MS)
    [f] = findings(doc, "sync-in-loop")
    assert f["evidence"]["overlappable_host_ns"] == 300 * MS
    assert f["estimated_speedup"] == round(573 / 373, 2)  # T = 320 + 52 + 201 ms; R = 200 ms of waits


# --- 4. blocking copies ----------------------------------------------------------------------------------

def upload_loop(blocking: bool, gpu_ns_each: int = 0) -> dict[str, Any]:
    b = DocBuilder()
    b.copy(MAIN + [py("train", 50)], "HtoD", 100, 100 * (16 << 20), 100 * MS, gpu_time_ns=gpu_ns_each * 100)
    if blocking:
        b.sync(MAIN + [py("train", 50)], 100, 400 * MS)
    b.cpu(MAIN + [py("train", 51)], 50)
    b.launch(MAIN + [py("train", 51)], BF16_GEMM, 100, 1 * MS, grid=(16, 32, 1))
    return b.doc


def test_blocking_copy_fires_on_pageable_style_uploads() -> None:
    doc = upload_loop(blocking=True)
    [f] = findings(doc, "blocking-copy")
    assert at(f) == (TRAIN, 50, "train")
    ev = f["evidence"]
    assert (ev["copies"], ev["direction"], ev["bytes"], ev["mean_bytes"]) == (100, "HtoD", 1_677_721_600, 16 << 20)
    assert ev["blocking"] == "100 stream synchronizations at the same line"
    assert ev["blocked_host_ns"] == 500 * MS and ev["estimated_copy_ns"] == 167_772_160
    # T = 50 ms CPU + 501 ms in GPU calls; R = min(copy at 10 GB/s, T - copy) = 167.8 ms
    assert f["estimated_speedup"] == round(551e6 / (551e6 - 167_772_160), 2) == 1.44
    assert "pin_memory=True" in f["suggestion"] and "non_blocking=True" in f["suggestion"]
    assert findings(doc, "sync-in-loop", min_speedup=1.0) == []  # the waits are this rule's, not sync-in-loop's


@pytest.mark.parametrize(("uploads", "syncs"), [(10, 20), (100, 30)])
def test_waits_beside_uploads_blocking_copy_does_not_report_are_sync_in_loops(uploads: int, syncs: int) -> None:
    """10 uploads (too few to be a loop's) beside 20 waits; 100 async uploads beside 30 waits (too few to
    block them): blocking-copy reports neither, so the waits are sync-in-loop's."""
    b = DocBuilder()
    b.copy(MAIN + [py("train", 50)], "HtoD", uploads, uploads * 4096, uploads * 10_000)
    b.sync(MAIN + [py("train", 50)], syncs, 300 * MS)
    b.cpu(MAIN + [py("train", 51)], 200)
    assert findings(b.doc, "blocking-copy", min_speedup=1.0) == []
    [f] = findings(b.doc, "sync-in-loop")
    assert at(f) == (TRAIN, 50, "train") and f["evidence"]["syncs"] == syncs


def test_blocking_copy_dominating_the_step_is_bounded_by_the_pinned_copy() -> None:
    b = DocBuilder()
    b.copy(MAIN + [py("train", 50)], "HtoD", 100, 100 * (64 << 20), 100 * MS)
    b.sync(MAIN + [py("train", 50)], 100, 600 * MS)
    b.cpu(MAIN + [py("train", 51)], 30)
    b.launch(MAIN + [py("train", 51)], BF16_GEMM, 100, 1 * MS, grid=(16, 32, 1))
    [f] = findings(b.doc, "blocking-copy")
    copy, pinned = 6_710_886_400 / 10e9 * 1e9, 6_710_886_400 / 25e9 * 1e9
    assert f["evidence"]["estimated_copy_ns"] == int(copy) and f["evidence"]["pinned_copy_ns"] == int(pinned)
    # T = 731 ms; afterwards the step is the pinned copy (268 ms), longer than the rest (60 ms)
    assert f["estimated_speedup"] == round(731e6 / int(pinned), 2) == 2.72


def test_blocking_copy_with_measured_copy_time_says_pageable() -> None:
    [f] = findings(upload_loop(blocking=True, gpu_ns_each=1_300_000), "blocking-copy")
    ev = f["evidence"]
    assert ev["copy_gpu_ns"] == 130 * MS and ev["bytes_per_s"] == 12_905_550_769 and ev["likely_pageable"] is True
    assert f["confidence"] == 0.7


def test_blocking_copy_not_on_async_copies_or_scalar_reads() -> None:
    assert findings(upload_loop(blocking=False), "blocking-copy") == []
    assert findings(item_loop(100), "blocking-copy") == []  # 4-byte reads are sync-in-loop's


def test_synchronous_copy_api_is_blocking_by_itself() -> None:
    b = DocBuilder()
    b.copy(MAIN + [py("train", 50)], "HtoD", 100, 100 * (16 << 20), 300 * MS, api="cudaMemcpy")
    b.cpu(MAIN + [py("train", 51)], 300)
    [f] = findings(b.doc, "blocking-copy")
    assert f["evidence"]["blocking"] == "synchronous copy call (cudaMemcpy)"


# --- 5. allocation churn ---------------------------------------------------------------------------------

def churn(frees: int) -> dict[str, Any]:
    b = DocBuilder()
    b.api(MAIN + [py("train", 60)], "cudaMalloc", 50, 100 * MS, nbytes=50 * (256 << 20))
    if frees:
        b.api(MAIN + [py("train", 62), lib("empty_cache", 222, "cuda/memory.py")], "cudaFree", frees, 150 * MS)
    b.cpu(MAIN + [py("train", 61)], 100)
    return b.doc


def test_allocation_churn_points_at_the_line_that_frees() -> None:
    [f] = findings(churn(50), "allocation-churn")
    assert at(f) == (TRAIN, 62, "train")
    ev = f["evidence"]
    assert (ev["memory"], ev["allocations"], ev["frees"], ev["bytes_allocated"]) == ("device", 50, 50, 50 * (256 << 20))
    assert ev["alloc_free_time_ns"] == 250 * MS
    assert ev["alloc_sites"] == [{"at": f"train ({TRAIN}:60)", "calls": 50}]
    assert ev["free_sites"] == [{"at": f"train ({TRAIN}:62)", "calls": 50}]
    assert "empty_cache" in f["suggestion"]
    assert f["estimated_speedup"] == 3.5  # T = 100 ms CPU + 250 ms allocating and freeing


def test_allocation_churn_not_on_growth_without_frees() -> None:
    assert findings(churn(0), "allocation-churn") == []


def test_pinned_host_churn_is_told_apart() -> None:
    b = DocBuilder()
    b.api(MAIN + [py("train", 60)], "cuMemHostAlloc", 40, 40 * MS, nbytes=40 * 4096, module="libcuda.so.1")
    b.api(MAIN + [py("train", 63)], "cuMemFreeHost", 40, 40 * MS, module="libcuda.so.1")
    b.cpu(MAIN + [py("train", 61)], 100)
    [f] = findings(b.doc, "allocation-churn")
    assert f["evidence"]["memory"] == "host" and at(f)[1] == 63


def test_compile_time_allocations_are_not_steady_state() -> None:
    b = DocBuilder()
    compile_path = MAIN + [lib("backend_compile_and_load", 395, "compiler.py"), nat("xla::Autotuner::GetTunedConfig")]
    b.api(compile_path, "cuMemHostAlloc", 78, 40 * MS, module="libcuda.so.1")
    b.api(compile_path, "cuMemFreeHost", 78, 40 * MS, module="libcuda.so.1")
    b.cpu(MAIN + [py("train", 61)], 100)
    assert findings(b.doc, "allocation-churn") == []


# --- 6. repeated elementwise sequences ------------------------------------------------------------------

def gelu_loop(fused: bool, gpu_ns_each: int = 0) -> dict[str, Any]:
    b = DocBuilder()
    line = MAIN + [py("gelu", 70)]
    b.cpu(line, 20)
    if fused:
        b.launch(line, "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>(...)",
                 200, 1 * MS, 200 * gpu_ns_each, grid=(16384, 1, 1), operator="gelu")
    else:
        for kernel, name, per_run in ((MUL, "mul", 6), (ADD, "add", 2), (TANH, "tanh", 1)):
            calls = 200 * per_run
            b.launch(line, kernel, calls, calls * 5_000, calls * gpu_ns_each, grid=(16384, 1, 1), operator=name)
    return b.doc


def test_elementwise_chain_names_the_sequence() -> None:
    [f] = findings(gelu_loop(fused=False), "elementwise-chain")
    assert at(f) == (TRAIN, 70, "gelu")
    ev = f["evidence"]
    assert ev["sequence"] == [{"op": "mul", "per_run": 6}, {"op": "add", "per_run": 2}, {"op": "tanh", "per_run": 1}]
    assert (ev["runs"], ev["kernels_per_run"], ev["launches"], ev["share_of_launches"]) == (200, 9, 1800, 1.0)
    assert "mul x6, add x2, tanh x1" in f["suggestion"]
    assert f["estimated_speedup"] is None and f["confidence"] == 0.3  # no GPU time: not estimated


def test_elementwise_chain_with_gpu_time_estimates_the_fusion() -> None:
    [f] = findings(gelu_loop(fused=False, gpu_ns_each=30_000), "elementwise-chain")
    assert f["evidence"]["gpu_time_ns"] == 54 * MS
    # T = the GPU's 54 ms (busier than the host's 29 ms); R = 54 x 8/9 = 48 ms
    assert f["estimated_speedup"] == 9.0 and f["confidence"] == 0.6


def test_one_op_called_from_many_layers_is_not_a_chain() -> None:
    """F.relu after each of 49 layers (97 ReLU kernels a step) plus one other op once a step, from one issuer:
    different tensors, one op each: nothing to fuse."""
    b = DocBuilder()
    line = MAIN + [py("step", 80)]
    b.cpu(line, 20)
    b.launch(line, MUL, 20 * 97, 20 * 97 * 5_000, 20 * 97 * 100_000, grid=(16384, 1, 1), operator="relu")
    b.launch(line, ADD, 20, 20 * 5_000, 20 * 100_000, grid=(16384, 1, 1), operator="add")
    assert findings(b.doc, "elementwise-chain") == []


def test_elementwise_chain_not_on_the_fused_op() -> None:
    assert findings(gelu_loop(fused=True), "elementwise-chain") == []
    assert findings(gelu_loop(fused=True, gpu_ns_each=30_000), "elementwise-chain") == []


def test_elementwise_chain_reports_library_lines_at_the_users_call() -> None:
    b = DocBuilder()
    issuing = MAIN + [py("step", 75), frame("python", "NewGELUActivation.forward", "/venv/lib/python3.12/"
                                             "site-packages/transformers/activations.py", 56, "transformers.activations")]
    for kernel, name, per_run in ((MUL, "mul", 5), (TANH, "tanh", 1)):
        b.launch(issuing, kernel, 100 * per_run, 1 * MS, grid=(16384, 1, 1), operator=name)
    [f] = findings(b.doc, "elementwise-chain")
    assert at(f) == (TRAIN, 75, "step")
    assert f["evidence"]["issued_at"] == ("NewGELUActivation.forward (/venv/lib/python3.12/site-packages/"
                                          "transformers/activations.py:56)")


# --- 7. data loading on the main thread -----------------------------------------------------------------

LOADER = [lib("_BaseDataLoaderIter.__next__", 631, "utils/data/dataloader.py"),
          lib("_SingleProcessDataLoaderIter._next_data", 675, "utils/data/dataloader.py"),
          lib("_MapDatasetFetcher.fetch", 52, "utils/data/_utils/fetch.py"),
          py("ImageDataset.__getitem__", 15, file="/srv/app/data.py", module="data")]
WORKER_LOADER = [lib("_BaseDataLoaderIter.__next__", 631, "utils/data/dataloader.py"),
                 lib("_MultiProcessingDataLoaderIter._next_data", 1329, "utils/data/dataloader.py")]


def loader_loop(loader: list[dict[str, Any]], samples: int, step_samples: int = 20) -> dict[str, Any]:
    b = DocBuilder()
    b.cpu(MAIN + [py("train", 80)] + loader, samples)
    b.cpu(MAIN + [py("train", 81)], step_samples)
    b.launch(MAIN + [py("train", 81)], BF16_GEMM, 100, 2 * MS, grid=(16, 32, 1))
    b.sync(MAIN + [py("train", 82)], 1, 50 * MS, api="cudaDeviceSynchronize", target="device")
    return b.doc


def test_dataloader_on_the_main_thread() -> None:
    [f] = findings(loader_loop(LOADER, 300), "dataloader-main-thread")
    assert at(f) == (TRAIN, 80, "train")
    ev = f["evidence"]
    assert (ev["loading_ns"], ev["samples"], ev["loader"]) == (300 * MS, 300, "main thread (num_workers=0)")
    assert ev["dataset_code"] == [{"at": "ImageDataset.__getitem__ (/srv/app/data.py:15)", "cpu_ns": 300 * MS}]
    assert ev["main_thread_gpu_wait_ns"] == 50 * MS and ev["share_of_time"] == round(300 / 372, 4)
    assert "num_workers" in f["suggestion"]
    # T = 320 ms CPU + 52 ms in GPU calls; R = min(300 ms loading, T - 50 ms waiting) = 300 ms
    assert f["estimated_speedup"] == round(372 / 72, 2) == 5.17


def test_dataloader_with_workers_is_quiet() -> None:
    # with workers the main thread only picks up and unpickles batches, however long that takes
    assert findings(loader_loop(WORKER_LOADER, 100, step_samples=20), "dataloader-main-thread") == []
    assert findings(loader_loop(LOADER, 10, step_samples=400), "dataloader-main-thread") == []  # 2% of T


# --- 8. FP32 GEMMs --------------------------------------------------------------------------------------

def gemm_loop(kernel: str, gpu_ns_each: int = 0) -> dict[str, Any]:
    b = DocBuilder()
    b.cpu(MAIN + [py("train", 90)], 10)
    b.launch(MAIN + [py("train", 90)], kernel, 50, MS // 2, 50 * gpu_ns_each, grid=(16, 32, 1), api="cuLaunchKernelEx")
    return b.doc


def test_fp32_gemm_fires_on_ffma_kernels() -> None:
    [f] = findings(gemm_loop(SGEMM), "fp32-gemm")
    assert at(f) == (TRAIN, 90, "train")
    assert f["evidence"]["launches"] == 50 and f["evidence"]["precision"] == "fp32 on CUDA cores"
    assert f["estimated_speedup"] is None and f["confidence"] == 0.4
    assert "allow_tf32" in f["suggestion"]


def test_fp32_gemm_with_gpu_time() -> None:
    [f] = findings(gemm_loop(SGEMM, gpu_ns_each=2 * MS), "fp32-gemm")
    assert f["evidence"]["gpu_time_ns"] == 100 * MS
    assert f["estimated_speedup"] == 4.0  # T = 100 ms of GPU time; R = 100 x (1 - 1/4)


def test_fp32_gemm_not_on_tensor_core_kernels() -> None:
    assert findings(gemm_loop(BF16_GEMM), "fp32-gemm") == []
    assert findings(gemm_loop("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize64x128x32"), "fp32-gemm") == []


# --- 9. small grids -------------------------------------------------------------------------------------

def grid_loop(kernel: str, grid: tuple[int, int, int], gpu_ns_each: int = 0, device: dict | None = None) -> dict[str, Any]:
    b = DocBuilder()
    b.cpu(MAIN + [py("train", 100)], 10)
    b.launch(MAIN + [py("train", 100)], kernel, 100, 1 * MS, 100 * gpu_ns_each, grid=grid, api="cuLaunchKernelEx")
    if device:
        b.doc["device"] = device
    return b.doc


def test_small_grid_without_gpu_time_is_a_low_confidence_candidate() -> None:
    [f] = findings(grid_loop("row_sum_kernel", (8, 1, 1)), "small-grid")
    ev = f["evidence"]
    assert (ev["kernel"], ev["launches"], ev["grid_blocks"], ev["sm_count"], ev["sm_count_source"]) == \
        ("row_sum_kernel", 100, 8, 132, "default")
    assert ev["idle_sm_share"] == 0.939 and ev["threads_per_block"] == 128
    assert f["estimated_speedup"] is None and f["confidence"] == 0.2  # SM count assumed
    [g] = findings(grid_loop("row_sum_kernel", (8, 1, 1), device={"name": "NVIDIA A100-SXM4-80GB"}), "small-grid")
    assert g["evidence"]["sm_count"] == 108 and g["evidence"]["sm_count_source"] == "name" and g["confidence"] == 0.3


def test_small_grid_with_gpu_time() -> None:
    doc = grid_loop("row_sum_kernel", (8, 1, 1), gpu_ns_each=1 * MS, device={"name": "NVIDIA H200", "sm_count": 132})
    [f] = findings(doc, "small-grid")
    assert f["evidence"]["mean_gpu_ns"] == 1 * MS and f["confidence"] == 0.6
    assert f["estimated_speedup"] == round(100 / (100 - 100 * (1 - 8 / 132)), 2) == 16.5


def test_small_grid_not_on_full_grids_short_or_bounded_kernels() -> None:
    assert findings(grid_loop("row_sum_kernel", (264, 1, 1)), "small-grid") == []
    assert findings(grid_loop("row_sum_kernel", (8, 1, 1), gpu_ns_each=5_000), "small-grid") == []
    assert findings(grid_loop(MUL, (1, 1, 1)), "small-grid") == []  # elementwise: short by construction


# --- 1. host-bound step (device time needed) ------------------------------------------------------------

def host_bound(gpu_busy_ms_each: int, with_trace: bool = True) -> dict[str, Any]:
    b = DocBuilder()
    b.cpu(MAIN + [py("train", 110), py("lr_schedule", 140)], 700)
    b.cpu(MAIN + [py("train", 111)], 10)
    b.launch(MAIN + [py("train", 111)], BF16_GEMM, 100, 1 * MS, 100 * gpu_busy_ms_each * MS, grid=(16, 32, 1))
    if with_trace:
        for i in range(100):
            b.trace("kernel", BF16_GEMM, 1_000_000_000 + i * 7 * MS, gpu_busy_ms_each * MS)
    return b.doc


def test_host_bound_needs_device_time() -> None:
    st, reason = status(host_bound(0, with_trace=False), "host-bound-step")
    assert st == "not_evaluated" and reason is not None and reason.startswith("the profile has no device activity")


def test_host_bound_fires_on_the_cpu_line_while_the_gpu_idles() -> None:
    [f] = findings(host_bound(2), "host-bound-step")
    assert at(f) == (TRAIN, 140, "lr_schedule")
    ev = f["evidence"]
    assert (ev["host_time_ns"], ev["gpu_busy_ns"], ev["gpu_idle_ns"], ev["device_time"]) == \
        (700 * MS, 200 * MS, 511 * MS, "trace")
    # T = 710 ms CPU + 1 ms launching; R = min(700 ms at the line, 511 ms GPU idle)
    assert f["estimated_speedup"] == round(711 / 200, 2) and f["confidence"] == 0.7


def test_host_bound_from_gpu_time_alone_is_less_certain() -> None:
    [f] = findings(host_bound(2, with_trace=False), "host-bound-step")
    assert f["evidence"]["device_time"] == "gpu_time" and f["confidence"] == 0.5


def test_host_bound_not_when_the_gpu_is_busy() -> None:
    assert findings(host_bound(7), "host-bound-step") == []  # 700 of 711 ms busy


# --- 10. collectives ------------------------------------------------------------------------------------

NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def allreduce_loop(start_ms: int | None) -> dict[str, Any]:
    """Each 20 ms: a 10 ms compute kernel, and an 8 ms all-reduce starting start_ms into it (None: no trace)."""
    b = DocBuilder()
    site = MAIN + [py("train", 120), lib("all_reduce", 2800, "distributed/distributed_c10d.py")]
    b.add(b.main + site + [frame("api", "ncclAllReduce", module="libnccl.so.2")], calls=100, api_time_ns=5 * MS,
          bytes=100 * (64 << 20))
    b.add(b.main + site + [frame("api", "ncclAllReduce", module="libnccl.so.2"),
                           frame("api", "cuLaunchKernelEx", module="libcuda.so.1"),
                           frame("kernel", NCCL_KERNEL, grid=[32, 1, 1], block=[512, 1, 1], shared_mem=0, stream=9)],
          calls=100, api_time_ns=1 * MS)
    b.cpu(MAIN + [py("train", 119)], 10)
    b.launch(MAIN + [py("train", 119)], BF16_GEMM, 100, 1 * MS, grid=(16, 32, 1))
    if start_ms is not None:
        for i in range(100):
            t0 = 1_000_000_000 + i * 20 * MS
            b.trace("kernel", BF16_GEMM, t0, 10 * MS, stream=7)
            b.trace("kernel", NCCL_KERNEL, t0 + start_ms * MS, 8 * MS, stream=9)
    return b.doc


def test_collectives_need_a_timeline() -> None:
    st, reason = status(allreduce_loop(None), "collective-not-overlapped")
    assert st == "not_evaluated"
    assert reason == ("100 collective calls, but the profile has no timeline of device activity (capture with "
                      "--trace and the CUPTI agent), so their overlap with compute is unknown")


def test_collectives_after_compute_fire() -> None:
    [f] = findings(allreduce_loop(10), "collective-not-overlapped")
    assert at(f) == (TRAIN, 120, "train")
    ev = f["evidence"]
    assert ev["collectives"] == {"ncclAllReduce": 100} and ev["bytes"] == 100 * (64 << 20)
    assert (ev["collective_gpu_ns"], ev["exposed_ns"], ev["overlapped_share"]) == (800 * MS, 800 * MS, 0.0)
    # T = the GPU's 1.8 s; R = min(800 ms exposed, 1000 ms of compute alone)
    assert f["estimated_speedup"] == round(1800 / 1000, 2) and "async_op=True" in f["suggestion"]


def test_collectives_overlapped_with_compute_are_quiet() -> None:
    assert findings(allreduce_loop(2), "collective-not-overlapped") == []  # all 8 ms beside compute
    assert findings(allreduce_loop(5), "collective-not-overlapped") == []  # 5 of 8 ms: overlapped already
    [f] = findings(allreduce_loop(6), "collective-not-overlapped")  # 4 of 8 ms exposed: half
    assert f["evidence"]["exposed_ns"] == 400 * MS and f["evidence"]["overlapped_share"] == 0.5
    st, reason = status(DocBuilder().doc, "collective-not-overlapped")
    assert (st, reason) == ("clear", None)  # no collectives at all
