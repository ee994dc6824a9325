#!/usr/bin/env bash
# Guarantee 3: corrupt or inconsistent shards stop fnvlp-pretrain with an error naming the file
# (and the dataset) before the first step: missing, truncated, wrong schema version,
# manifest/shard mismatch, and a flipped bit inside an image chunk (data.verify=full, the default:
# every shard's sha256 is checked before libhdf5 opens it). With data.verify=size the flipped bit
# is caught at the read, before the batch is trained on (HDF5's Fletcher32 on every chunk). Each
# failure at start-up is recorded in the run's summary.json (status failed, the error).
# `fnvlp-shard --verify` reports the same faults.
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
shard=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['shards'][1]['file'])" "$work/shards/manifest.json")
echo "  corrupting $shard (the second of $(find "$work/shards" -maxdepth 1 -name '*.h5' | wc -l) shards)"

variant() {  # fresh copy of the dataset in $work/$1
  rm -rf "${work:?}/$1"
  cp -r "$work/shards" "$work/$1"
  data=$work/$1
}
# Must fail before the first step with /pattern/ in the output.
fails_at_open() {
  expect_failure pretrain --out "$work/run-$1"
  expect_output "$2"
  [ ! -s "$work/run-$1/metrics.jsonl" ] || fail "$1: steps ran before the error"
  # The run directory records the failure: summary.json from the start-up, naming the file.
  /usr/bin/python3 - "$work/run-$1/summary.json" "$2" <<'PY' || fail "$1: no summary.json of the failure"
import json, re, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "failed" and s["exit_code"] == 1 and s["phase"] == "startup", s
assert re.search(sys.argv[2], s["error"]), (sys.argv[2], s["error"])
PY
}

echo "== missing shard"
variant missing
rm "$data/$shard"
fails_at_open missing "$shard: missing \(listed in .*manifest.json\)"

echo "== truncated shard"
variant truncated
truncate -s $(($(stat -c %s "$data/$shard") / 2)) "$data/$shard"
fails_at_open truncated "$shard: [0-9]+ bytes, .*manifest.json says [0-9]+ \(truncated or replaced\?\)"

echo "== wrong schema version (manifest bytes and sha256 updated, so only the schema differs)"
variant schema
/usr/bin/python3 - "$data" "$shard" <<'PY'
import h5py, hashlib, json, os, sys
d, s = sys.argv[1], sys.argv[2]
with h5py.File(os.path.join(d, s), "r+") as f:
    f.attrs.modify("fnvlp_schema", 99)
m = json.load(open(os.path.join(d, "manifest.json")))
for e in m["shards"]:
    if e["file"] == s:
        p = os.path.join(d, s)
        e["bytes"] = os.path.getsize(p)
        e["sha256"] = hashlib.sha256(open(p, "rb").read()).hexdigest()
json.dump(m, open(os.path.join(d, "manifest.json"), "w"), indent=2)
PY
fails_at_open schema "$shard: shard schema version 99, this build reads versions 1 \(raw images\) and 2 \(jpeg\)"

echo "== manifest/shard mismatch (manifest claims one more image row)"
variant mismatch
/usr/bin/python3 - "$data" "$shard" <<'PY'
import json, os, sys
d, s = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(d, "manifest.json")))
for e in m["shards"]:
    if e["file"] == s:
        e["num_images"] += 1
json.dump(m, open(os.path.join(d, "manifest.json"), "w"), indent=2)
PY
fails_at_open mismatch "$shard:/images has [0-9]+ rows, manifest says [0-9]+"

echo "== one bit flipped inside an image chunk"
variant bitflip
/usr/bin/python3 - "$data/$shard" <<'PY'
import h5py, sys
p = sys.argv[1]
with h5py.File(p, "r") as f:
    info = f["images"].id.get_chunk_info(0)
pos = info.byte_offset + info.size // 2
with open(p, "r+b") as f:
    f.seek(pos)
    b = f.read(1)
    f.seek(pos)
    f.write(bytes([b[0] ^ 0x10]))
print("  flipped bit 4 of byte %d (image chunk 0 at %d, %d bytes)" % (pos, info.byte_offset, info.size))
PY
fails_at_open bitflip "$shard: sha256 [0-9a-f]{64} differs from .*manifest.json's [0-9a-f]{64}"
expect_output "not opened"
echo "== the same with data.verify=size: HDF5's Fletcher32 at the read"
# 40 steps of 2 x 16 pairs read every image of the 1080 (one epoch is 33 steps).
expect_failure pretrain --out "$work/run-bitflip-size" --set train.max_steps=40 \
  --set data.verify=size
expect_output "$shard:/images: read of image rows"
expect_output "[Cc]hecksum|Fletcher|filter"
steps=$( [ -f "$work/run-bitflip-size/metrics.jsonl" ] && wc -l <"$work/run-bitflip-size/metrics.jsonl" || echo 0)
[ "$steps" -lt 40 ] || fail "the run finished despite the corrupt chunk"
echo "  stopped after $steps logged steps of 40"
grep -m1 -oE "$shard:/images: read of image rows[^;]*;[^;]*" "$work/out.txt" || true
set +e
"${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --verify "$data" >"$work/verify.txt" 2>&1
vrc=$?
set -e
[ "$vrc" -ne 0 ] || fail "fnvlp-shard --verify accepted the flipped bit"
expect_output "$shard" "$work/verify.txt"
echo "PASS"
