#!/usr/bin/env bash
# Behaviour fingerprint of every training method: a 90-step deterministic tiny run of each on one
# synthetic labelled set (3 epochs, so the grouped samplers' epochs 1-2 and GloFND's filtering are
# in it), logging every step; writes OUT/METHOD.jsonl with each step's losses and method
# telemetry (timings dropped). Two builds are compared with `diff -r OUT1 OUT2`: a refactor that
# claims unchanged behaviour must leave every file identical. FNVLP_SETS="k=v ..." adds settings to
# every method's run (e.g. train.static_step=true: the static step's fingerprint).
#   bash tests/bench/method_losses.sh BUILD OUT [NP]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
bin=$(cd "$1" && pwd) out=$2 np=${3:-2}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
vocab=${FNVLP_SHARED_DIR:-$src/../shared}/data/vocab/bert-base-uncased-vocab.txt
source "$src/tests/integration/common.sh" method_losses
mpirun=(mpirun --oversubscribe -np "$np")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HDF5_USE_FILE_LOCKING=FALSE
mkdir -p "$out"
synth_data "$work/synth" 400 3 8 7
shard_split "$work/synth" train "$work/shards" --shard-size 500
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=16
  --set train.max_steps=90 --set train.epochs=3 --set train.log_every=1
  --set optim.warmup_steps=10 --set checkpoint.every_steps=0 --set train.deterministic=true
  --set sampler.search_space=128)
declare -A methods=(
  [uniform]=""
  [glofnd]="negatives.method=glofnd negatives.alpha=0.05 negatives.glofnd_init=0.5 negatives.glofnd_lr=0.3"
  [fnc]="negatives.method=fnc negatives.alpha=0.05"
  [oracle]="negatives.method=oracle"
  [srcl]="negatives.method=srcl"
  [tcl]="loss.tcl=true"
  [grit]="sampler.kind=grit sampler.q=1"
  [hardening]="sampler.kind=grit sampler.schedule=hardening"
  [falcon]="sampler.kind=falcon"
  [momentum]="loss.soft_targets=momentum loss.queue_size=64"
)
for name in "${!methods[@]}"; do
  sets=()
  for kv in ${methods[$name]} ${FNVLP_SETS:-}; do sets+=(--set "$kv"); done
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" "${sets[@]}" --out "$work/$name" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
  python3 - "$work/$name/metrics.jsonl" >"$out/$name.jsonl" <<'PY'
import json, sys
drop = {"samples_per_s", "samples_per_s_per_rank", "data_wait", "elapsed_s", "phase_ms"}
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({k: v for k, v in sorted(r.items()) if k not in drop}))
PY
  echo "$name: $(wc -l <"$out/$name.jsonl") records, last loss $(tail -1 "$out/$name.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("loss"))')"
done
