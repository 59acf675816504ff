#!/usr/bin/env bash
# On the GPU host (the `run` tool, carrying .gpu-host), from the repository root:
#   bash bench/gpu_duty_scaling.sh
# Does --gpu-duty scale device time right on a real GPU? ResNet-50's GPU time per step from full captures
# (sampled + device) against three duty cycles' (sampled at 0.1 and 0.25, exact at 0.1), alternating with the
# workload alone; then the GPU tests of device activity. The daemons log each attached share (debug). Writes
# under $OUT (at most 4 files): overhead.txt (the rows, and the table whose "GPU ms/step" column is the
# answer), gpu-tests.txt, daemon-logs.tgz.
set -u
source tests/gpu/host.sh
OUT=${OUT:-/tmp/deepctx-out}
mkdir -p "$OUT"
timeout 380 python3 bench/gpu_overhead.py --deepctx "python3 -m deepctx.cli.main" \
    --deepctxd "python3 -m deepctx.daemon.main" --pin --workloads resnet50 \
    --variants alone,deepctx_sampled_device,deepctx_sampled_device_duty10,deepctx_sampled_device_duty25,deepctx_exact_device_duty10 \
    --alternate 6 --repeat 2 --daemon-log /tmp/duty-logs --daemon-log-level debug >"$OUT/overhead.txt" 2>&1
echo "gpu_overhead: exit $?" >>"$OUT/overhead.txt"
tar czf "$OUT/daemon-logs.tgz" -C /tmp duty-logs 2>/dev/null  # before the tests: a run cut short keeps them
[ "${SKIP_GPU_TESTS:-0}" = 1 ] || \
    (cd tests && timeout 200 python3 -m pytest -q -s gpu/test_device_activity.py) >"$OUT/gpu-tests.txt" 2>&1
tail -n 12 "$OUT/overhead.txt"
[ -f "$OUT/gpu-tests.txt" ] && tail -n 3 "$OUT/gpu-tests.txt"
