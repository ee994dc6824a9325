# shellcheck shell=bash
# Shared by the fault tests (sourced): arguments, a tiny synthetic dataset, the pretrain command
# line and assertions. Usage of every test: TEST.sh BUILD_DIR VOCAB SOURCE_DIR
set -euo pipefail
bin=$1 vocab=$2 src=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_fault.XXXXXX")
trap 'rm -rf "$work"' EXIT
export HDF5_USE_FILE_LOCKING=FALSE
unset FNVLP_FAULT
mpirun=(mpirun --oversubscribe -np 2)
fail() { echo "FAIL: $*"; exit 1; }

# 240 synthetic images x 5 captions at 64 px, sharded in 300-pair shards (4 shards).
make_data() {
  "${mpirun[@]}" "$bin/data_prep/fnvlp-synth" --out "$work/synth" --images 240 \
    --captions-per-image 5 --classes 8 --image-size 64 --seed 3 --val-fraction 0.1 >/dev/null
  "${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" \
    --image-root "$work/synth" --split-file "$work/synth/splits.json" --split train \
    --vocab "$vocab" --out "$work/shards" --image-size 64 --shard-size 300 >/dev/null
}

# Deterministic tiny-preset run of 14 steps; extra --set arguments follow.
common=(--config "$src/jobs/configs/tiny.yaml" --set train.batch_size=16 --set train.max_steps=14
        --set train.log_every=1 --set optim.warmup_steps=3 --set train.deterministic=true
        --set train.export_embeddings=false --set watchdog.timeout_s=120)
pretrain() { "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "${data:-$work/shards}" "${common[@]}" "$@"; }

# Runs a command that must fail; sets $rc and $elapsed, keeps its output in $work/out.txt.
expect_failure() {
  local t0
  [ "$1" != pretrain ] || set -- "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --data "${data:-$work/shards}" "${common[@]}" "${@:2}"
  t0=$(date +%s.%N)
  set +e
  timeout 300 "$@" >"$work/out.txt" 2>&1
  rc=$?
  set -e
  elapsed=$(echo "$(date +%s.%N) - $t0" | bc)
  [ "$rc" -ne 0 ] || { tail -20 "$work/out.txt"; fail "'$*' succeeded, expected a failure"; }
  [ "$rc" -ne 124 ] || fail "'$*' hung (killed after 300 s)"
  echo "  failed as expected: exit $rc after ${elapsed}s"
}

# grep that prints the output on a miss.
expect_output() {
  grep -qE -- "$1" "${2:-$work/out.txt}" || { tail -30 "${2:-$work/out.txt}"; fail "output lacks /$1/"; }
}

# Per-step (itc, itm, mlm) of two runs must be identical, bit for bit, as must the final metrics.
same_metrics() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
def rows(run):
    r = [json.loads(l) for l in open(run + "/metrics.jsonl")]
    steps = [x["step"] for x in r]
    assert steps == sorted(set(steps)), run + ": duplicate or unordered steps " + str(steps)
    return {x["step"]: (x["itc"], x["itm"], x["mlm"], x["loss"]) for x in r if "itc" in x}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
diff = [(s, a.get(s), b.get(s)) for s in sorted(set(a) | set(b)) if a.get(s) != b.get(s)]
assert not diff, "runs differ: " + str(diff[:3])
fa = json.load(open(sys.argv[1] + "/summary.json"))
fb = json.load(open(sys.argv[2] + "/summary.json"))
keys = ("itc", "itm", "mlm", "loss", "temp", "lr")
ma = {k: fa["final_metrics"][k] for k in keys}
mb = {k: fb["final_metrics"][k] for k in keys}
assert ma == mb, "final metrics differ: %s vs %s" % (ma, mb)
assert fa["steps"] == fb["steps"] == max(a), (fa["steps"], fb["steps"])
print("  bitwise equal: %d steps, final loss %r" % (len(a), ma["loss"]))
PY
}

# The checkpoint `latest` points to, and a check that it is committed and intact (sha256).
check_latest() {
  /usr/bin/python3 - "$1" <<'PY'
import hashlib, json, os, sys
d = sys.argv[1]
target = os.readlink(d + "/latest")
m = json.load(open(d + "/" + target + "/COMMITTED"))
for f, e in m["files"].items():
    p = d + "/" + target + "/" + f
    assert os.path.getsize(p) == e["bytes"], p
    assert hashlib.sha256(open(p, "rb").read()).hexdigest() == e["sha256"], p
print(target)
PY
}
