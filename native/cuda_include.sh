#!/bin/sh
# Prints the first include directory that holds HEADER (cupti.h, cuda.h), or nothing.
#   cuda_include.sh HEADER [PYTHON]
# Looks in $CUPTI_INCLUDE, $CUDA_HOME (include, extras/CUPTI/include), the pip wheels
# (nvidia-cuda-cupti and nvidia-cuda-runtime install nvidia/cu*/include) of PYTHON, then /usr/local/cuda.
header=$1
python=${2:-python3}
wheels=$("$python" - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia
    for base in nvidia.__path__:
        for d in sorted(glob.glob(os.path.join(base, "cu*", "include")), reverse=True) + [os.path.join(base, "cuda_cupti", "include"), os.path.join(base, "cuda_runtime", "include")]:
            print(d)
except Exception:
    pass
PY
)
for d in "$CUPTI_INCLUDE" ${CUDA_HOME:+"$CUDA_HOME/include" "$CUDA_HOME/extras/CUPTI/include"} $wheels \
         /usr/local/cuda/include /usr/local/cuda/extras/CUPTI/include; do
  if [ -n "$d" ] && [ -f "$d/$header" ]; then
    echo "$d"
    exit 0
  fi
done
exit 0
