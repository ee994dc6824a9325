#!/usr/bin/env bash
# A preemption signal while the epoch-end embedding export runs (issue 63): SIGUSR1 to both ranks
# while epoch 0's export sleeps (FNVLP_FAULT export.sleep, 6 s). The job finishes the export,
# checkpoints and exits 3; `--resume auto` continues; epoch 0's export then exists whole (every
# pair's row) and fnvlp-simstat reads it.
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
# 1,080 pairs at 2 x 16: epoch 0 is 33 steps, its export runs after step 33.
run=(--out "$work/run" --set train.max_steps=36 --set train.export_embeddings=true
     --set checkpoint.every_steps=0)
(
  export FNVLP_FAULT="export.sleep:0:*:6"
  pretrain "${run[@]}"
) >"$work/first.txt" 2>&1 &
job=$!
for _ in $(seq 1 240); do
  [ "$(cat "$work"/run/logs/rank-*.log 2>/dev/null | grep -c 'fault: export.sleep fires')" -eq 2 ] && break
  sleep 0.5
done
[ "$(cat "$work"/run/logs/rank-*.log | grep -c 'fault: export.sleep fires')" -eq 2 ] ||
  { kill "$job" 2>/dev/null; tail -20 "$work/first.txt"; fail "the export never started"; }
pkill -USR1 -f "fnvlp-pretrain .*--out $work/run" || fail "no rank to signal"
echo "  SIGUSR1 sent to both ranks inside epoch 0's export"
set +e
wait "$job"
rc=$?
set -e
[ "$rc" -eq 3 ] || { tail -20 "$work/first.txt"; fail "exit $rc after SIGUSR1 in the export, expected 3"; }
echo "== resumed"
pretrain "${run[@]}" --resume auto >"$work/resumed.txt" 2>&1 ||
  { tail -20 "$work/resumed.txt"; fail "the resume failed"; }
expect_output "resumed from" "$work/resumed.txt"
/usr/bin/python3 - "$work/run/embeddings/epoch-000.h5" "$work/shards/manifest.json" <<'PY'
import json, sys
import h5py, numpy as np
n = json.load(open(sys.argv[2]))["num_pairs"]
with h5py.File(sys.argv[1]) as f:
    ids = f["pair_id"][()]
    assert sorted(ids.tolist()) == list(range(n)), ("pair ids", len(ids), n)
    for k in ("image_emb", "text_emb"):  # unit rows: none left at the file's initial zeros
        norms = np.linalg.norm(f[k][()], axis=1)
        assert f[k].shape[0] == n and np.allclose(norms, 1, atol=1e-3), (k, norms.min())
print(f"  epoch-000.h5: all {n} pairs, unit embeddings")
PY
"${mpirun[@]}" "$bin/analysis/fnvlp-simstat" --embeddings "$work/run/embeddings/epoch-000.h5" \
  --out "$work/stats.h5" --alpha 0.05 --quantiles 2 >"$work/simstat.txt" 2>&1 ||
  { tail -20 "$work/simstat.txt"; fail "fnvlp-simstat could not read the export"; }
echo "  fnvlp-simstat read it"
echo "PASS"
