#!/usr/bin/env bash
# On the GPU host (the `run` tool, carrying .gpu-host), from the repository root:
#   bash bench/gpu_duty_scaling.sh
# Does --gpu-duty scale device time right on a real GPU? ResNet-50's GPU time per step from full captures
# (sampled + device) against duty cycles' (VARIANTS), alternating with the workload alone; then the GPU tests
# of device activity (SKIP_GPU_TESTS=1: not). The daemons log each attached share (debug), the workload
# writes its steps' ends and bench/nvml_trace.py samples NVML's utilization meanwhile, so that
# bench/duty_shares.py can tell the GPU time per step the shares recorded, and what NVML's busy time gives.
# Writes under $OUT (at most 4 files): overhead.txt (the rows, and the table whose "GPU ms/step" column is
# the answer), gpu-tests.txt, daemon-logs.tgz (logs, profiles, step times, NVML samples).
set -u
source tests/gpu/host.sh
OUT=${OUT:-/tmp/deepctx-out}
VARIANTS=${VARIANTS:-alone,deepctx_sampled_device,deepctx_sampled_device_duty10,deepctx_sampled_device_duty25,deepctx_exact_device_duty10}
mkdir -p "$OUT" /tmp/duty-logs
python3 bench/nvml_trace.py /tmp/duty-logs/nvml.jsonl &
NVML=$!
timeout "${BENCH_TIMEOUT:-380}" python3 bench/gpu_overhead.py --deepctx "python3 -m deepctx.cli.main" \
    --deepctxd "python3 -m deepctx.daemon.main" --pin --workloads resnet50 --variants "$VARIANTS" \
    --alternate 6 --repeat 2 --daemon-log /tmp/duty-logs --daemon-log-level debug >"$OUT/overhead.txt" 2>&1
echo "gpu_overhead: exit $?" >>"$OUT/overhead.txt"
kill -TERM "$NVML"; wait "$NVML"
tar czf "$OUT/daemon-logs.tgz" -C /tmp duty-logs 2>/dev/null  # before the tests: a run cut short keeps them
python3 bench/duty_shares.py "$OUT/overhead.txt" /tmp/duty-logs/daemon-default.log \
    --steps /tmp/duty-logs/steps-resnet50.txt --nvml /tmp/duty-logs/nvml.jsonl >>"$OUT/overhead.txt" 2>&1
[ "${SKIP_GPU_TESTS:-0}" = 1 ] || \
    (cd tests && timeout 200 python3 -m pytest -q -s gpu/test_device_activity.py) >"$OUT/gpu-tests.txt" 2>&1
tail -n 40 "$OUT/overhead.txt"
[ -f "$OUT/gpu-tests.txt" ] && tail -n 3 "$OUT/gpu-tests.txt"
