# Source from the repository root on the GPU host: bcc from the carried bundle, the deepctx package from
# this tree (the subpackages linked under a deepctx/ namespace), the native agent built, artifacts to $OUT.
source .gpu-host/setup.sh
mkdir -p /tmp/dctx/deepctx
for d in proto probes daemon cli; do ln -sfn "$PWD/$d" "/tmp/dctx/deepctx/$d"; done
export PYTHONPATH=/tmp/dctx${PYTHONPATH:+:$PYTHONPATH}
export DEEPCTX_ARTIFACTS=${OUT:-/tmp/deepctx-artifacts}
make -s -C native PYTHON=python3 >/dev/null && echo "gpu-host: native agent built"
