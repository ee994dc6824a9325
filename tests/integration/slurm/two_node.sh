#!/usr/bin/env bash
# Two hosts on one machine: env/local-slurm.sh with FNVLP_SLURM_NODES=2 runs two slurmd, each in
# its own network, UTS and mount namespace (own address, hostname and /tmp). At smoke scale
# `sbatch --nodes=2 --ntasks-per-node=1 slurm/pretrain_4m.sh` finds no shards and submits
# shard -> pretrain, both at 2 nodes x 1 rank (srun --mpi=pmix, Open MPI over TCP between the
# namespaces); the pretraining losses equal those of the same run at 2 ranks on one node
# (mpirun, shared memory). Tears the namespaced cluster down at the end (FNVLP_KEEP_CLUSTER=1 keeps
# it). Needs root with CAP_NET_ADMIN; without it the test says SKIPPED (exit 77). So does a checkout
# or build under /tmp: each node has a /tmp of its own, where the job finds neither.
set -euo pipefail
build=$1 src=$2
export FNVLP_SLURM_NODES=2
for d in "$src" "$build"; do
  case "$(realpath -m "$d")/" in
    /tmp/*)
      echo "SKIPPED: $d is under /tmp, which each node of the two-node cluster has privately (its own mount namespace): the nodes' jobs would not find it (slurmstepd \"couldn't chdir\", then a failed batch script or srun's JobLaunchFailure); run from a checkout and build outside /tmp (e.g. /work or /var/tmp)"
      exit 77
      ;;
  esac
done
ls=$src/env/local-slurm.sh
if [ "$(id -u)" -ne 0 ] || ! ip netns add "fnvlp-probe$$" 2>/dev/null; then
  echo "SKIPPED: network namespaces need root with CAP_NET_ADMIN (ip netns add failed)"
  exit 77
fi
ip netns del "fnvlp-probe$$"
bash "$ls" start
[ "${FNVLP_KEEP_CLUSTER:-0}" = 1 ] || trap 'bash "$ls" stop' EXIT
eval "$(bash "$ls" env)"
# shellcheck source=tests/integration/slurm/lib.sh
T_OWN_SHARDS=1 source "$(dirname "$0")/lib.sh" "$build" "$src" two_node
export FNVLP_STAGES="shard pretrain" FNVLP_NODES=2 FNVLP_RANKS=2
mkdir -p "$FNVLP_LOGS"
cd "$FNVLP_ROOT"

[ "$(sinfo -h -N -o '%N' | sort -u | tr '\n' ' ')" = "fnvlp-n1 fnvlp-n2 " ] || fail "nodes: $(sinfo -N)"
# Each node is a host of its own: distinct hostnames and addresses.
# shellcheck disable=SC2016 # expanded on each node
hosts=$(srun --nodes=2 --ntasks-per-node=1 sh -c 'echo "$(hostname) $(hostname -I)"' | sort)
echo "$hosts"
[ "$(awk '{print $1}' <<<"$hosts" | tr '\n' ' ')" = "fnvlp-n1 fnvlp-n2 " ] || fail "hostnames: $hosts"
[ "$(awk '{print $2}' <<<"$hosts" | tr '\n' ' ')" = "10.77.0.11 10.77.0.12 " ] || fail "addresses: $hosts"

echo "== sbatch --nodes=2 --ntasks-per-node=1 slurm/pretrain_4m.sh (no shards yet)"
# The job's environment reaches its ranks: TCP (and self) only, so no rank can take a
# shared-memory path to the other node.
id=$(OMPI_MCA_btl=self,tcp sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 \
  --gpus-per-node=0 --mem=4G --time=30:00 --output="$FNVLP_LOGS/%x-%j.out" slurm/pretrain_4m.sh)
bash slurm/pipeline.sh wait --job "$id"
assert_chain_completed "$FNVLP_WORK/chain.tsv"
while IFS=$'\t' read -r stage jid; do
  [ "$jid" != none ] || continue
  nodes=$(job_field "$jid" NodeList)
  [ "$nodes" = "fnvlp-n[1-2]" ] || fail "$stage job $jid ran on $nodes, not on both nodes"
  echo "  $stage job $jid on $nodes"
done <"$FNVLP_WORK/chain.tsv"
grep -q '^shard' "$FNVLP_WORK/chain.tsv" || fail "no shard job in the chain"
pre=$(awk -F'\t' '$1 == "pretrain" {print $2}' "$FNVLP_WORK/chain.tsv")
grep -q 'launch: srun --mpi=pmix' "$FNVLP_LOGS"/fnvlp-pretrain-"$pre".out ||
  fail "pretrain ranks not launched with srun --mpi=pmix"
# Each node's slurmd launched one rank of the pretraining step.
sdir=${FNVLP_SLURM_DIR:-/var/tmp/fnvlp-slurm-2n}
for n in fnvlp-n1 fnvlp-n2; do
  grep -q "launch task StepId=$pre\.0 " "$sdir/log/slurmd-$n.log" ||
    fail "slurmd of $n launched no task of the pretraining step $pre.0"
done

echo "== the same pretraining at 2 ranks on one node (mpirun, outside SLURM)"
two_node_run=$FNVLP_RUN
(
  unset SLURM_CONF
  export FNVLP_RUN=$FNVLP_WORK/one_node FNVLP_LAUNCHER=mpirun
  fnvlp_pretrain
) >"$FNVLP_LOGS/one_node.out" 2>&1 || {
  tail -20 "$FNVLP_LOGS/one_node.out"
  fail "the one-node reference run failed"
}
/usr/bin/python3 - "$two_node_run" "$FNVLP_WORK/one_node" <<'PY'
import json, sys
def losses(run):
    s = json.load(open(run + "/summary.json"))
    assert s["status"] == "completed" and s["steps"] == 24, (run, s)
    rows = [json.loads(l) for l in open(run + "/metrics.jsonl")]
    return [(r["step"], r["itc"], r["itm"], r["mlm"]) for r in rows if "itc" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) >= 10, a
if a != b:
    for x, y in zip(a, b):
        print("two nodes", x, "| one node", y)
    sys.exit("FAIL: the two-node losses differ from the one-node run's")
print("two_node: %d logged steps equal, final ITC %.6f ITM %.6f MLM %.6f" % ((len(a),) + a[-1][1:]))
PY
echo PASS
