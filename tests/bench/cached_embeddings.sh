#!/usr/bin/env bash
# sampler.embeddings=cached against refresh (issue 27): GRIT q=1 and FALCON on one labelled
# synthetic set, same seed, tiny preset at 64 px, 2 ranks. refresh embeds every pair once more at
# each epoch end (the export pass, train.export_embeddings=true); cached groups by the embeddings
# of the training steps and runs with the export off. Prints per run and grouped epoch the
# in-batch same-label (known false-negative) rate and the q percentiles, and each run's wall time.
#   bash tests/bench/cached_embeddings.sh BUILD [IMAGES=1000] [EPOCHS=4]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
bin=$(cd "$1" && pwd) images=${2:-1000} epochs=${3:-4}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
vocab=${FNVLP_SHARED_DIR:-$src/../shared}/data/vocab/bert-base-uncased-vocab.txt
source "$src/tests/integration/common.sh" cached_embeddings
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HDF5_USE_FILE_LOCKING=FALSE
synth_data "$work/synth" "$images" 5 8 7
shard_split "$work/synth" train "$work/shards"
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=32
  --set train.epochs="$epochs" --set train.log_every=5 --set optim.warmup_steps=50
  --set checkpoint.every_steps=0 --set sampler.search_space=512)
declare -A modes=(
  [refresh]="--set sampler.embeddings=refresh --set train.export_embeddings=true"
  [cached]="--set sampler.embeddings=cached --set train.export_embeddings=false"
)
for sampler in "grit --set sampler.grit.q=1" falcon; do
  for mode in refresh cached; do
    name="${sampler%% *}-$mode"
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --set sampler.kind=$sampler \
      ${modes[$mode]} --out "$work/$name" >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
    echo "$name $start $(date +%s.%N)" >>"$work/wall.txt"
  done
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
wall = {n: float(b) - float(a) for n, a, b in (l.split() for l in open(w + "/wall.txt"))}
print("| run | epoch | same-label rate | q mean | q p5 | q p95 |")
print("|---|---|---|---|---|---|")
for name in wall:
    recs = [json.loads(l) for l in open(f"{w}/{name}/metrics.jsonl")]
    for e in sorted({r["epoch"] for r in recs if "q_mean" in r}):
        m = [r for r in recs if r.get("epoch") == e and "q_mean" in r]
        avg = lambda k: sum(r[k] for r in m) / len(m)
        print(f"| {name} | {e} | {avg('batch_fn_rate_label'):.3f} | {avg('q_mean'):.3f} | "
              f"{avg('q_p5'):.3f} | {avg('q_p95'):.3f} |")
u = [json.loads(l) for l in open(f"{w}/grit-refresh/metrics.jsonl")]
u0 = [r["batch_fn_rate_label"] for r in u if r.get("epoch") == 0 and "batch_fn_rate_label" in r]
print(f"\nepoch 0 (uniform, every run): same-label rate {sum(u0) / len(u0):.3f}")
for name, s in wall.items():
    print(f"{name}: {s:.1f} s wall")
PY
