#!/usr/bin/env bash
# Submits a sharded driftgate sweep to Slurm: a job array of N shards (sweep.sbatch) and the merge
# (merge.sbatch) to run after every shard succeeded (--dependency=afterok). From the checkout:
#
#   scripts/slurm/submit.sh --shards 3 RESULTS_DIR gate --base B --patch P --suite S [options]
#
# prints the two job ids and where the result will be:
#   sweep job 41 (array 0-2): RESULTS_DIR/shard<i>
#   merge job 42 (afterok:41): RESULTS_DIR/merged/verdict.json
# --cpus C asks C CPUs for each shard (sbatch --cpus-per-task; pass driftgate --threads C to use
# them). Partition, account, time limit and so on come from Slurm's own input variables
# (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT, ...), which both jobs read. The driftgate
# binary is $DRIFTGATE, else build/driftgate of this checkout; it and RESULTS_DIR must be on a file
# system every node sees. Logs go to RESULTS_DIR/logs/. When a shard fails, Slurm cancels the merge
# (--kill-on-invalid-dep=yes); `driftgate merge` by hand then names the missing shards (exit 5).
set -euo pipefail

usage() {
  echo "usage: $0 --shards N [--cpus C] RESULTS_DIR gate|verify|bench ARGS..." >&2
  exit 2
}
here=$(cd "$(dirname "$0")" && pwd)
shards=
cpus=
while [ $# -gt 0 ]; do
  case $1 in
    --shards) shards=${2:-}; shift 2 || usage ;;
    --cpus) cpus=${2:-}; shift 2 || usage ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || usage
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --shards must be a whole number >= 1, not '$shards'" >&2; exit 2; }
[ -z "$cpus" ] || [[ $cpus =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --cpus must be a whole number >= 1, not '$cpus'" >&2; exit 2; }
case $2 in gate | verify | bench) ;; *) echo "submit.sh: '$2' cannot be sharded: gate, verify or bench" >&2; exit 2 ;; esac

mkdir -p "$1/logs"
results=$(cd "$1" && pwd)
shift
if compgen -G "$results/shard*" >/dev/null; then
  echo "submit.sh: $results already holds shard results; use an empty directory" >&2
  exit 2
fi
export DRIFTGATE=${DRIFTGATE:-$(cd "$here/../.." && pwd)/build/driftgate}
[ -x "$DRIFTGATE" ] || { echo "submit.sh: no driftgate binary at $DRIFTGATE (build it, or set DRIFTGATE)" >&2; exit 2; }

sweep_opts=(--parsable --array="0-$((shards - 1))" --output="$results/logs/sweep-%A_%a.out")
[ -z "$cpus" ] || sweep_opts+=(--cpus-per-task="$cpus")
sweep=$(sbatch "${sweep_opts[@]}" "$here/sweep.sbatch" "$results" "$@")
sweep=${sweep%%;*}   # --parsable prints "id" or "id;cluster"
merge=$(sbatch --parsable --dependency="afterok:$sweep" --kill-on-invalid-dep=yes \
  --output="$results/logs/merge-%j.out" "$here/merge.sbatch" "$results")
merge=${merge%%;*}
if [ "$1" = gate ]; then merged=$results/merged/verdict.json; else merged=$results/merged.json; fi
echo "sweep job $sweep (array 0-$((shards - 1))): $results/shard<i>"
echo "merge job $merge (afterok:$sweep): $merged"
