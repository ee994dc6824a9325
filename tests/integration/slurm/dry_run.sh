#!/usr/bin/env bash
# FNVLP_DRY_RUN=1 (issue 29): the pipeline, a campaign and `bash slurm/pretrain_4m.sh` print every
# sbatch line (resources, dependencies) and every array task's config, and submit and write
# nothing. The printed lines must equal, argument for argument, what the same commands hand to
# sbatch when they do submit: sbatch is replaced by a recorder on PATH (as in chain_record.sh),
# whose job ids are mapped back to the dry run's stand-ins (JOBNAME.dry) before comparing.
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL (dry_run): $*"
  exit 1
}
mkdir -p "$tmp/bin"
# The recorder: one line per call (sbatch + its shell-quoted arguments), then "id<TAB>job name"
# to the id map; prints ids 101, 102, ...
cat >"$tmp/bin/sbatch" <<'SB'
#!/usr/bin/env bash
n=$(($(cat "$T_IDS" 2>/dev/null || echo 100) + 1))
echo "$n" >"$T_IDS"
line=$(printf ' %q' sbatch "$@")
echo "${line# }" >>"$T_CALLS"
name=$(sed -nE 's/(^|.* )--job-name=([^ ]+).*/\2/p' <<<"$*")
printf '%s\t%s\n' "$n" "${name:-job}" >>"$T_NAMES"
echo "$n"
SB
chmod +x "$tmp/bin/sbatch"
export PATH=$tmp/bin:$PATH T_IDS=$tmp/ids T_CALLS=$tmp/calls T_NAMES=$tmp/names
export FNVLP_ROOT=$src FNVLP_SCALE=smoke FNVLP_SLURM_DIR=$tmp/none FNVLP_BUILD_DIR=$tmp/none
export FNVLP_SKIP_MISSING="fnvlp-shard fnvlp-synth fnvlp-pretrain fnvlp-simstat fnvlp-report fnvlp-finetune fnvlp-eval"

# The recorded calls with each job id replaced by the dry run's stand-in for that job.
recorded() {
  /usr/bin/python3 - "$T_CALLS" "$T_NAMES" <<'PY'
import re, sys
names = dict(l.rstrip("\n").split("\t") for l in open(sys.argv[2]))
for line in open(sys.argv[1]):
    print(re.sub(r"(after(?:ok|any))((?::[0-9]+)+)",
                 lambda m: m.group(1) + "".join(":" + names[i] + ".dry"
                                                for i in m.group(2).split(":")[1:]),
                 line.rstrip("\n")))
PY
}

# Runs "$@" twice in work directory $1: dry (sbatch must not be called, nothing written) and for
# real (into the recorder); the sbatch lines must agree. Leaves the dry run's stderr in $tmp/dry.
compare() {
  local what=$1
  shift
  export FNVLP_WORK=$tmp/work-$what
  rm -f "$T_CALLS" "$T_NAMES" "$T_IDS"
  FNVLP_DRY_RUN=1 "$@" >"$tmp/dry.out" 2>"$tmp/dry" || { cat "$tmp/dry"; fail "$what: dry run failed"; }
  [ ! -e "$T_CALLS" ] || fail "$what: the dry run called sbatch: $(cat "$T_CALLS")"
  [ ! -e "$FNVLP_WORK" ] || fail "$what: the dry run wrote $(find "$FNVLP_WORK" | head -5)"
  grep '^sbatch ' "$tmp/dry" >"$tmp/dry.lines" || fail "$what: the dry run printed no sbatch line"
  "$@" >"$tmp/real.out" 2>&1 || { cat "$tmp/real.out"; fail "$what: the submitting run failed"; }
  recorded >"$tmp/real.lines"
  diff "$tmp/dry.lines" "$tmp/real.lines" >"$tmp/diff" ||
    { cat "$tmp/diff"; fail "$what: the dry run's sbatch lines differ from the submitted ones"; }
  echo "$what: $(wc -l <"$tmp/dry.lines") sbatch lines, the same as submitted"
}

# 1. The six-stage chain.
compare pipeline bash "$src/slurm/pipeline.sh" submit
grep -q -- '--job-name=fnvlp-eval .*--dependency=afterok:fnvlp-finetune.dry ' "$tmp/dry.lines" ||
  fail "pipeline: eval does not depend on finetune in the dry run"
[ -f "$tmp/work-pipeline/chain.tsv" ] || fail "pipeline: the submitting run wrote no chain.tsv"

# 2. A campaign: the array line and each task's config, equal to the task.json files written.
compare campaign bash "$src/slurm/ablation_campaign.sh" "$src/slurm/campaigns/smoke.yaml" \
  --out "$tmp/work-campaign/camp"
grep -q -- "--array=0-3%2 " "$tmp/dry.lines" || fail "campaign: no 4-task array with %2"
for f in "$tmp"/work-campaign/camp/tasks/*/task.json; do
  i=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["index"])' "$f")
  grep -qxF "array task $i: $(cat "$f")" "$tmp/dry" || fail "campaign: task $i's config not printed as $f"
done
[ "$(grep -c '^array task ' "$tmp/dry")" -eq 4 ] || fail "campaign: expected 4 task configs"
echo "campaign: the 4 array tasks' configs printed as written"

# 3. A matrix's env section sets the campaign's FNVLP_* variables before their defaults are
#    resolved (the array's --time and --mem here); one already in the environment wins; a key that
#    is not an FNVLP_* variable is refused.
cat >"$tmp/env.yaml" <<'YAML'
name: envtest
methods: [uniform]
seeds: [1]
env: {FNVLP_TIME: "07:00", FNVLP_MEM: 3G}
YAML
env_dry() { FNVLP_WORK=$tmp/work-env FNVLP_DRY_RUN=1 bash "$src/slurm/ablation_campaign.sh" "$@" >/dev/null 2>"$tmp/dry"; }
env_dry "$tmp/env.yaml" || { cat "$tmp/dry"; fail "env matrix: dry run failed"; }
grep -q -- '--mem=3G --time=07:00 --array=0-0%' < <(grep '^sbatch .*--array' "$tmp/dry") ||
  fail "env matrix: the array is not submitted with the matrix's --mem=3G --time=07:00: $(grep '^sbatch .*--array' "$tmp/dry")"
FNVLP_MEM=5G env_dry "$tmp/env.yaml" || { cat "$tmp/dry"; fail "env matrix: dry run failed"; }
grep -q -- '--mem=5G --time=07:00 --array=0-0%' < <(grep '^sbatch .*--array' "$tmp/dry") ||
  fail "env matrix: FNVLP_MEM=5G from the environment did not win over the matrix"
grep -q 'FNVLP_MEM=5G from the environment' "$tmp/dry" || fail "env matrix: the override is not logged"
sed -i 's/FNVLP_MEM: 3G/PATH: \/tmp/' "$tmp/env.yaml"
if env_dry "$tmp/env.yaml"; then fail "env matrix: a non-FNVLP_ variable was accepted"; fi
grep -q "env: 'PATH' is not an FNVLP_\* variable" "$tmp/dry" || { cat "$tmp/dry"; fail "env matrix: no reason given"; }
echo "campaign matrix env: applied, overridden by the environment, non-FNVLP_ keys refused"

# 4. `bash slurm/pretrain_4m.sh` at scale 4m: its own #SBATCH resources, then (no shards) the whole
#    chain after it, as `bash slurm/pipeline.sh submit` submits it.
export FNVLP_SCALE=4m FNVLP_WORK=$tmp/work-4m
FNVLP_DRY_RUN=1 bash "$src/slurm/pretrain_4m.sh" >/dev/null 2>"$tmp/dry" ||
  { cat "$tmp/dry"; fail "pretrain_4m.sh: dry run failed"; }
[ ! -e "$FNVLP_WORK" ] || fail "pretrain_4m.sh: the dry run wrote $FNVLP_WORK"
head -1 < <(grep '^sbatch ' "$tmp/dry") | grep -q -- \
  '--job-name=fnvlp-pretrain-4m --nodes=4 --ntasks-per-node=8 --gpus-per-node=8 ' ||
  fail "pretrain_4m.sh: the entry job's #SBATCH resources are not printed first"
[ "$(grep -c '^sbatch ' "$tmp/dry")" -eq 7 ] || fail "pretrain_4m.sh: expected the entry + 6 stages"
echo "pretrain_4m.sh: entry job (4 nodes x 8 GPUs) + the 6-stage chain printed"

# 5. What the 4M job trains, printed by its dry run: the mission's method (FALCON's batches,
#    GloFND's thresholds from 40% of ALBEF's 30 epochs) in bf16 with CUDA graphs on its GPUs;
#    eager fp32 on a CPU allocation; another method and step mode when asked.
want='pretraining: method falcon_glofnd, bf16, static step in CUDA graphs on cuda'
grep -qF "$want" "$tmp/dry" || { grep pretraining "$tmp/dry"; fail "pretrain_4m.sh: no '$want'"; }
line=$(grep -F "$want" "$tmp/dry")
for kv in sampler.kind=falcon negatives.method=glofnd train.epochs=30 negatives.start_epoch=12 \
  train.precision=bf16 train.cuda_graphs=true; do
  grep -qE "[ (]${kv//./\\.}[ )]" <<<"$line" || fail "pretrain_4m.sh: the dry run's settings lack $kv: $line"
done
FNVLP_GPUS_PER_NODE=0 FNVLP_DRY_RUN=1 bash "$src/slurm/pretrain_4m.sh" >/dev/null 2>"$tmp/dry" ||
  { cat "$tmp/dry"; fail "pretrain_4m.sh on CPUs: dry run failed"; }
grep -qF 'pretraining: method falcon_glofnd, fp32, eager step on cpu' "$tmp/dry" ||
  { grep pretraining "$tmp/dry"; fail "pretrain_4m.sh on CPUs: not eager fp32"; }
FNVLP_METHOD=fnc FNVLP_STEP_MODE=static FNVLP_DRY_RUN=1 bash "$src/slurm/pretrain_4m.sh" \
  >/dev/null 2>"$tmp/dry" || { cat "$tmp/dry"; fail "pretrain_4m.sh with fnc: dry run failed"; }
grep -q 'pretraining: method fnc, bf16, static step on cuda (.*negatives.method=fnc' "$tmp/dry" ||
  { grep pretraining "$tmp/dry"; fail "pretrain_4m.sh: FNVLP_METHOD=fnc FNVLP_STEP_MODE=static not printed"; }
if FNVLP_METHOD=nosuch FNVLP_DRY_RUN=1 bash "$src/slurm/pretrain_4m.sh" >/dev/null 2>"$tmp/dry"; then
  fail "pretrain_4m.sh: an unknown FNVLP_METHOD was accepted"
fi
grep -q 'FNVLP_METHOD=nosuch: no jobs/configs/methods/nosuch.yaml' "$tmp/dry" ||
  { cat "$tmp/dry"; fail "pretrain_4m.sh: no reason for the unknown method"; }
FNVLP_DRY_RUN=1 bash "$src/slurm/pretrain_4m.sh" >/dev/null 2>"$tmp/dry" || fail "dry run failed"
grep -qF 'dry run: initial weights: random (FNVLP_INIT empty)' "$tmp/dry" ||
  { cat "$tmp/dry"; fail "pretrain_4m.sh: the initial weights not printed"; }
: >"$tmp/deit.pth"
: >"$tmp/bert.safetensors"
FNVLP_INIT="$tmp/deit.pth $tmp/bert.safetensors" FNVLP_DRY_RUN=1 bash "$src/slurm/pretrain_4m.sh" \
  >/dev/null 2>"$tmp/dry" || { cat "$tmp/dry"; fail "pretrain_4m.sh with FNVLP_INIT: dry run failed"; }
grep -qF "dry run: initial weights: $tmp/deit.pth $tmp/bert.safetensors" "$tmp/dry" ||
  { cat "$tmp/dry"; fail "pretrain_4m.sh: FNVLP_INIT not printed"; }
if FNVLP_INIT="$tmp/nosuch.pth" FNVLP_DRY_RUN=1 bash "$src/slurm/pretrain_4m.sh" >/dev/null 2>"$tmp/dry"; then
  fail "pretrain_4m.sh: a missing FNVLP_INIT file was accepted"
fi
grep -qF "FNVLP_INIT: $tmp/nosuch.pth is not a readable file" "$tmp/dry" ||
  { cat "$tmp/dry"; fail "pretrain_4m.sh: no reason for the missing FNVLP_INIT file"; }
echo "pretrain_4m.sh: method, precision and step printed (GPUs, CPUs, another method; unknown refused); FNVLP_INIT printed, a missing file refused"
echo PASS
