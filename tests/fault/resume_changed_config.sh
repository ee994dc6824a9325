#!/usr/bin/env bash
# Settings changed at a resume (issue 63), GloFND at 2 ranks checkpointed at step 12, each case
# resumed from that checkpoint (ARCHITECTURE.md, "Elastic resume", has the three classes):
#   refused, exit 2 on every rank before anything loads, naming each key, old -> new, no step run:
#     another model (vision width, text depth: libtorch's load would fail on a tensor), another
#     method (negatives.method: GloFND's per-pair state would be read as another method's);
#   noted: another learning rate resumes with one log line naming it, old -> new;
#   free: another log_every resumes without that line.
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
glofnd=(--set negatives.method=glofnd --set checkpoint.every_steps=6)
pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=12 >"$work/first.txt" 2>&1 ||
  { tail -20 "$work/first.txt"; fail "the first run failed"; }
cp -r "$work/run" "$work/pristine"
lines=$(grep -c '"itc"' "$work/run/metrics.jsonl")
fresh() { rm -rf "$work/run" && cp -r "$work/pristine" "$work/run"; }

refused() {  # PATTERN ARGS...
  local pattern=$1
  shift
  fresh
  expect_failure pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=18 --resume auto "$@"
  [ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "exit $rc, expected 2"; }
  expect_output "$pattern"
  [ "$(grep -cE -- "$pattern" "$work/out.txt")" -eq 1 ] || fail "the error was reported more than once"
  ! grep -qE "No such serialized|resumed from" "$work/out.txt" || fail "a rank loaded the checkpoint"
  [ "$(grep -c '"itc"' "$work/run/metrics.jsonl")" -eq "$lines" ] || fail "a step ran"
}
echo "== another model: refused"
refused "holds another model than the config asks for \(checkpoint -> now: model.vision_width 128 -> 64, model.text_layers 2 -> 1\)" \
  --set model.vision_width=64 --set model.text_layers=1
echo "== another method: refused"
refused "settings that its state depends on \(.*config.yaml -> now: negatives.method glofnd -> fnc\)" \
  --set negatives.method=fnc

echo "== another learning rate: resumes, one line says so"
fresh
pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=18 --resume auto \
  --set optim.lr=0.002 >"$work/lr.txt" 2>&1 || { tail -20 "$work/lr.txt"; fail "the resume with another lr failed"; }
expect_output "resumed from .*step-0000012" "$work/lr.txt"
expect_output "the resume changes optim.lr [0-9.e-]+ -> [0-9.e-]+ \(from the resumed step on\)" "$work/lr.txt"
[ "$(grep -c 'the resume changes' "$work/lr.txt")" -eq 1 ] || fail "the change was logged more than once"

echo "== another log_every: resumes, no line"
fresh
pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=18 --resume auto \
  --set train.log_every=3 >"$work/log.txt" 2>&1 || { tail -20 "$work/log.txt"; fail "the resume with another log_every failed"; }
expect_output "resumed from .*step-0000012" "$work/log.txt"
! grep -q "the resume changes" "$work/log.txt" || fail "a free key was logged as a change"
echo "PASS"
