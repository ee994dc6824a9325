#!/usr/bin/env bash
# Runs a tests/golden Python script on env/install-python.sh's interpreter (Debian's torch and
# h5py, PyPI's safetensors): ctest weights.make and weights.export_twin.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=$(bash "$here/../../env/install-python.sh" | tail -n 1)
exec "$python" "$@"
