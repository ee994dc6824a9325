#!/usr/bin/env bash
# Configs validated (issue 28): a value outside its field's range, an unknown key or a missing
# config file is a usage error on every rank together: exit 2 before any step, one message naming
# the key, the value and the range (or the file), never a crash (log_every=0 was a SIGFPE) or a
# hang (export_batch=0 looped with the watchdog off).
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data

check_usage_error() {  # PATTERN ARGS...: the run must exit 2 with PATTERN in its output
  local pattern=$1
  shift
  expect_failure pretrain --out "$work/run" "$@"
  [ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "exit code $rc, expected 2 (usage error)"; }
  expect_output "$pattern"
  [ "$(grep -cE -- "$pattern" "$work/out.txt")" -eq 1 ] || fail "the error was reported more than once"
  [ ! -e "$work/run/metrics.jsonl" ] || fail "a step ran before the config error"
}

echo "== train.log_every=0"
check_usage_error "'train.log_every' = 0 is outside \[1, inf\)" --set train.log_every=0
echo "== train.export_batch=-4 with the watchdog off"
check_usage_error "'train.export_batch' = -4 is outside \[1, inf\)" --set train.export_batch=-4 \
  --set watchdog.timeout_s=0
echo "== negatives.alpha=1.5"
check_usage_error "'negatives.alpha' = 1.5 is outside \[0, 1\]" --set negatives.alpha=1.5
echo "== optim.eps=0 (open bound)"
check_usage_error "'optim.eps' = 0 is outside \(0, inf\)" --set optim.eps=0
echo "== optim.lr=nan"
check_usage_error "'optim.lr' = nan is outside \[0, inf\)" --set optim.lr=.nan
echo "== an unknown key"
check_usage_error "unknown key\(s\) train.log_evry" --set train.log_evry=5
echo "== a missing overlay file"
check_usage_error "cannot open '$work/none.yaml'" --config "$work/none.yaml"
echo "PASS"
