# Source from the repository root on the GPU host: bcc from the carried bundle, the deepctx package from
# this tree (the subpackages linked under a deepctx/ namespace), the native agent built, artifacts kept.
#
# The device tool brings back at most eight files from $OUT (on 2026-12-06 the Inductor cache, the pairs'
# logs and the tests' artifacts took the slots, and the rest was lost). So the tests' artifacts go to
# $DEEPCTX_ARTIFACTS (/tmp/deepctx-artifacts), and when the sourcing script exits they are packed into one
# file, $OUT/artifacts.tgz (`tar xzf` it). Write a batch's own outputs there too, not to $OUT.
source .gpu-host/setup.sh
mkdir -p /tmp/dctx/deepctx
for d in proto host profiles probes daemon cli; do ln -sfn "$PWD/$d" "/tmp/dctx/deepctx/$d"; done
export PYTHONPATH=/tmp/dctx${PYTHONPATH:+:$PYTHONPATH}
export DEEPCTX_ARTIFACTS=/tmp/deepctx-artifacts
mkdir -p "$DEEPCTX_ARTIFACTS"
if [ -n "${OUT:-}" ]; then
    trap 'tar czf "$OUT/artifacts.tgz" -C "$DEEPCTX_ARTIFACTS" . 2>/dev/null' EXIT
fi
make -s -C native PYTHON=python3 >/dev/null && echo "gpu-host: native agent built"
# deepctxd needs grpcio-health-checking (and the grpcio/protobuf versions its generated code was made with),
# which the GPU host's image lacks: bundle them as extra wheels.
python3 -c "import grpc_health" 2>/dev/null || echo "gpu-host: grpc_health missing: bundle it, e.g. ../shared/gpu-host/bundle.sh grpcio-health-checking==1.85.1 grpcio==1.85.3 protobuf==7.36.2" >&2
