#!/usr/bin/env bash
# Import of a base-sized ALBEF file (~840 MB of fp32; issue 62): fnvlp's store::import_weights
# (bench_weights_import) against the PyTorch twin's torch.load / safetensors load_file +
# load_state_dict, both reading the same files on the same machine in one run, each as its own
# process after its model is built. Prints one table (seconds; resident set of the model alone;
# peak during the import, both in MiB); results: tests/bench/results/weights_import.md.
#   bash tests/bench/bench_weights.sh [BUILD_DIR] [WORK_DIR] [CONFIG]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$src/build}
work=${2:-${TMPDIR:-/tmp}/fnvlp_bench_weights}
config=${3:-$src/jobs/configs/base.yaml}
python=$(bash "$src/env/install-python.sh" | tail -n 1)
cmake --build "$build" --target bench_weights_import >/dev/null
[ -f "$work/albef.pth" ] ||
  OMP_NUM_THREADS=1 "$python" "$src/tests/golden/make_weights.py" --bench --config "$config" --out "$work"
# The files once through the page cache before either side reads them.
cat "$work/albef.safetensors" "$work/albef.pth" >/dev/null

twin() {  # FILE -> the same JSON line as bench_weights_import
  "$python" - "$src" "$work/model.yaml" "$1" <<'PY'
import json, sys, time
sys.path.insert(0, sys.argv[1] + "/tests/bench")
import albef_names as names, pytorch_albef as twin, torch, yaml
from safetensors.torch import load_file
m = yaml.safe_load(open(sys.argv[2]))
model = twin.Albef(m)
def mib(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
open("/proc/self/clear_refs", "w").write("5")
before = mib("VmRSS:")
t0 = time.perf_counter()
f = sys.argv[3]
sd = load_file(f) if f.endswith(".safetensors") else torch.load(f, map_location="cpu")["model"]
model.load_state_dict(names.from_albef(sd, m, model.state_dict().keys()), strict=True)
s = time.perf_counter() - t0
print(json.dumps({"seconds": round(s, 3), "rss_model_mib": round(before), "peak_mib": round(mib("VmHWM:")),
                  "loaded": len(model.state_dict())}))
PY
}

printf '| file | reader | seconds | model alone MiB | peak MiB | peak - model MiB |\n|---|---|---:|---:|---:|---:|\n'
for f in albef.safetensors albef.pth; do
  for side in fnvlp twin; do
    if [ "$side" = fnvlp ]; then
      line=$("$build/tests/bench/bench_weights_import" "$work/model.yaml" "$work/$f")
      reader="fnvlp import_weights"
    else
      line=$(twin "$work/$f")
      case $f in *.safetensors) reader="safetensors load_file + load_state_dict" ;;
        *) reader="torch.load + load_state_dict" ;; esac
    fi
    /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[3])
row = (sys.argv[1], sys.argv[2], r["seconds"], r["rss_model_mib"], r["peak_mib"],
       r["peak_mib"] - r["rss_model_mib"])
print("| %s | %s | %.2f | %.0f | %.0f | %.0f |" % row)' \
      "$f ($(($(stat -c %s "$work/$f") >> 20)) MiB)" "$reader" "$line"
  done
done
