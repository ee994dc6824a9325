#!/usr/bin/env bash
# Installs the CUDA libtorch of the GPU build (FNVLP_GPU=1 env/build.sh): the PyTorch wheel from
# PyPI, pinned to the version the lent GPU machines run (2.11.0, built for CUDA 13.0), into a
# virtual environment under ${FNVLP_GPU_PREFIX:-~/.cache/fnvlp/gpu} (never the system Python;
# outside the checkout so fresh clones, CI's included, reuse it). The wheel
# brings libtorch_cuda, its CUDA 13 runtime, cuBLAS, cuDNN and NCCL as pip packages; a cluster
# user skips this script and points Torch_DIR at the cluster's libtorch instead.
# Prints the prefix's Torch CMake directory on its last line. Idempotent.
set -euo pipefail
prefix=${FNVLP_GPU_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/fnvlp/gpu}
torch_version=${FNVLP_TORCH_VERSION:-2.11.0}
venv=$prefix/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || {
    echo "install-gpu: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
    exit 1
  }
fi
have=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ "${have%%+*}" != "$torch_version" ]; then
  echo "install-gpu: installing torch==$torch_version into $venv (about 3 GB with its CUDA libraries)" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "torch==$torch_version" numpy
fi
# h5py and PyYAML: tests/bench/bench_pretrain.sh runs the PyTorch twin on this wheel against the
# same shard batch as fnvlp (a few MB). The build does not need them: a failure only warns.
"$venv/bin/python" -c 'import h5py, yaml' 2>/dev/null ||
  "$venv/bin/python" -m pip install -q --disable-pip-version-check h5py pyyaml ||
  echo "install-gpu: h5py/PyYAML not installed; bench_pretrain.sh's PyTorch 2.x rows will say SKIPPED" >&2
"$venv/bin/python" - <<'PY'
import torch, sys
cuda = torch.version.cuda
if not cuda or not cuda.startswith("13."):
    sys.exit(f"install-gpu: torch {torch.__version__} is built for CUDA {cuda}, need 13.x")
print(torch.utils.cmake_prefix_path + "/Torch")
PY
