#!/usr/bin/env bash
# The Python the weight tests and examples run on (tests/golden/weights_python.sh, USAGE.md
# "Weights in and out"): a virtual environment over Debian's python3 (its torch, numpy, h5py
# from env/install-debian.sh) with PyPI's safetensors, under ${FNVLP_PY_PREFIX:-~/.cache/fnvlp/py}
# (outside the checkout, so fresh clones and CI reuse it). Prints the interpreter's path on its
# last line. Idempotent; a few seconds when present.
set -euo pipefail
prefix=${FNVLP_PY_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/fnvlp/py}
venv=$prefix/venv
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv" || {
    echo "install-python: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
    exit 1
  }
fi
if ! "$venv/bin/python" -c 'import safetensors' 2>/dev/null; then
  echo "install-python: installing safetensors into $venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check 'safetensors>=0.4,<1' || {
    echo "install-python: pip install safetensors failed (PyPI unreachable?)" >&2
    exit 1
  }
fi
"$venv/bin/python" -c 'import torch, h5py, numpy, safetensors' || {
  echo "install-python: $venv lacks torch, h5py or numpy (run env/install-debian.sh)" >&2
  exit 1
}
echo "$venv/bin/python"
