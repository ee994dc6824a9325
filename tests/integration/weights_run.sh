#!/usr/bin/env bash
# fnvlp-pretrain --init-from and fnvlp-export at 2 ranks, tiny preset (issue 62):
#  1. DeiT (timm names, safetensors) + BERT (Hugging Face names, torch.save) start a run; its
#     RUN/init_weights.json says what was loaded, what kept its initialisation (cross-attention,
#     the ITC/ITM heads, the temperature) and what in the files was unused;
#  2. an ALBEF checkpoint (torch.save, {"model": ...} with momentum copies and queues) starts a
#     run at learning rate 0 whose checkpoint fnvlp-export writes back: every tensor of the
#     ALBEF file's model equals the export's, bit for bit, through import, broadcast, a step,
#     a checkpoint and the export;
#  3. with momentum distillation, the momentum model takes the ALBEF file's momentum copy
#     (RUN/init_weights_momentum.json), the online model its online weights;
#  4. a truncated file and a file of another width end every rank with exit 2 and a message
#     naming the file (no rank left waiting).
set -euo pipefail
bin=$1 vocab=$2 src=$3
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" weights
python=$(bash "$src/env/install-python.sh" | tail -n 1)
synth_data "$work/synth" 48 3 6 5
shard_split "$work/synth" train "$work/shards" --shard-size 200
"$python" "$src/tests/golden/make_weights.py" --config "$src/jobs/configs/tiny.yaml" \
  --out "$work/w" >/dev/null
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=16
        --set train.max_steps=1 --set checkpoint.every_steps=0 --set train.export_embeddings=false)

echo "== DeiT + BERT"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/a" \
  --init-from "$work/w/deit.safetensors" --init-from "$work/w/bert.bin"
/usr/bin/python3 - "$work/a/init_weights.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
layouts = [f["layout"] for f in r["files"]]
assert layouts == ["timm_vit", "hf_bert"], layouts
left = set(r["left_at_init"])
want = {f"{m}.{wb}" for m in ("vision_proj", "text_proj", "itm_head") for wb in ("weight", "bias")}
want |= {f"fusion_layers.0.{m}.{wb}" for m in ("cross_q", "cross_kv", "cross_output", "cross_norm")
         for wb in ("weight", "bias")} | {"temp"}
assert left == want, sorted(left ^ want)
assert "head.weight" in r["files"][0]["unused"]
assert r["loaded"]["text_layers.0.self_qkv.weight"].endswith(
    "bert.encoder.layer.0.attention.self.query.weight + bert.encoder.layer.0.attention.self.key.weight"
    " + bert.encoder.layer.0.attention.self.value.weight"), r["loaded"]["text_layers.0.self_qkv.weight"]
print(f"init_weights.json: {len(r['loaded'])} loaded, {len(left)} at their initialisation")
PY

echo "== ALBEF checkpoint, learning rate 0, exported"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/b" \
  --init-from "$work/w/albef.pth" --set optim.lr=0 --set optim.min_lr=0
"$bin/jobs/fnvlp-export" --checkpoint "$work/b/checkpoints/latest" --out "$work/b.safetensors"
"$python" - "$work/w/albef.pth" "$work/b.safetensors" <<'PY'
import sys
import torch
from safetensors.torch import load_file
albef = torch.load(sys.argv[1])["model"]
out = load_file(sys.argv[2])
mine = {k for k in albef if "_m." not in k and not k.endswith("_queue") and k != "queue_ptr"}
assert mine <= set(out), sorted(mine - set(out))[:5]
diff = [k for k in mine if not torch.equal(albef[k], out[k])]
assert not diff, f"{len(diff)} tensors differ, e.g. {diff[:3]}"
print(f"export: {len(mine)} ALBEF tensors bitwise equal after import, a step at lr 0, export")
PY

echo "== ALBEF checkpoint with momentum distillation: the momentum model from its momentum copy"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/m" \
  --init-from "$work/w/albef.pth" --set loss.soft_targets=momentum --set loss.queue_size=32
# The same online weights without momentum copies (the twin's own state dict): the momentum
# model is then the online one's copy, and step 1's ITC (momentum keys) must differ.
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/n" \
  --init-from "$work/w/twin_state_dict.pt" --set loss.soft_targets=momentum --set loss.queue_size=32
/usr/bin/python3 - "$work/m" "$work/n" <<'PY'
import json, sys
def itc(run):
    return [json.loads(l) for l in open(run + "/metrics.jsonl") if '"itc"' in l][0]["itc"]
r = json.load(open(sys.argv[1] + "/init_weights_momentum.json"))
n = json.load(open(sys.argv[2] + "/init_weights_momentum.json"))
assert not n["loaded"] and len(n["left_at_init"]) == 91, "a file without momentum copies gave some"
assert itc(sys.argv[1]) != itc(sys.argv[2]), "the momentum copy did not reach the momentum model"
assert sorted(r["left_at_init"]) == ["itm_head.bias", "itm_head.weight", "temp"], r["left_at_init"]
src = r["loaded"]["visual_encoder.pos_embed"]
assert src.endswith("visual_encoder_m.pos_embed"), src
online = json.load(open(sys.argv[1] + "/init_weights.json"))
assert not online["left_at_init"] and "visual_encoder_m.pos_embed" in online["files"][0]["unused"]
print(f"momentum model: {len(r['loaded'])} parameters from the momentum copy; step-1 ITC "
      f"{itc(sys.argv[1]):.4f} against {itc(sys.argv[2]):.4f} with the online copy")
PY

echo "== hostile and mismatched files"
head -c 5000 "$work/w/albef.pth" >"$work/cut.pth"
for f in "$work/cut.pth" "$work/w/deit.pth"; do
  set +e
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/c" --init-from "$f" \
    --set model.vision_width=64 >"$work/c.out" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "--init-from $f exited $rc, expected 2: $(tail -3 "$work/c.out")"
  grep -q -- "--init-from: $f" "$work/c.out" || fail "no error naming $f: $(tail -3 "$work/c.out")"
done
grep -q "needs \[1, 1, 64\]" "$work/c.out" || fail "no shape in the error: $(tail -3 "$work/c.out")"
echo "PASS"
