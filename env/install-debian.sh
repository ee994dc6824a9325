#!/usr/bin/env bash
# Installs every Debian package fnvlp needs to build, test and run. Idempotent: packages that
# are already present are left alone, and apt-get update runs only when something is missing.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git clang-format
  # libFuzzer targets (tests/fuzz): clang 14 with its sanitizer and fuzzer runtimes
  clang-14 libclang-rt-14-dev
  # core libraries
  libtorch-dev libopenblas0-pthread libblas-dev
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libtrilinos-kokkos-dev
  libcxxopts-dev libgtest-dev libgmock-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev libssl-dev libicu-dev
  libfaiss-dev
  # scheduler; Lmod for the module of env/modules (tests: env.lmod_module)
  slurm-wlm munge lmod
  # script lint (tests: slurm.lint)
  shellcheck
  # the report as a browser renders it (tests/integration/report_browser.sh in slurm.full_chain)
  chromium
  # plots, benchmarks, reference scripts (Debian's python, not a venv)
  python3 python3-numpy python3-pil python3-h5py python3-matplotlib gnuplot-nox
  # the PyTorch twin of the pretraining benchmark (tests/bench/pytorch_albef.py; ~17 MB beside
  # libtorch-dev)
  python3-torch python3-yaml
  # its venv with PyPI's safetensors (env/install-python.sh; tests: weights.*)
  python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-debian: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install-debian: all ${#packages[@]} packages present"
fi

# libtorch must run on OpenBLAS, not the reference BLAS (about 40x slower matmuls).
if command -v update-alternatives >/dev/null; then
  arch_lib="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
  for alt in libblas.so.3 liblapack.so.3; do
    target="$arch_lib/openblas-pthread/$alt"
    if [ -e "$target" ]; then
      $SUDO update-alternatives --set "$alt-$(basename "$arch_lib")" "$target" >/dev/null 2>&1 || true
    fi
  done
fi
