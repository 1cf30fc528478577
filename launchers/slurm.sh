#!/usr/bin/env bash
# Submit primus_hydra to Slurm: one task per node, each running launchers/direct.sh, which derives the node's rank
# and the rendezvous host from Slurm and starts the node's workers through primus_hydra's elastic agent.
set -euo pipefail

# shellcheck source=launchers/_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

usage() {
    cat <<'USAGE'
usage: launchers/slurm.sh [options] [-- primus_hydra arguments...]

Without --srun and outside an allocation: submits a batch script with sbatch (its text on stdin).
Inside an allocation ($SLURM_JOB_ID set) or with --srun: runs srun directly.
Either way srun starts launchers/direct.sh once per node (--ntasks-per-node=1).

options:
  -N, --nodes N           nodes (default: the allocation's inside one, else 1)
  -p, --partition P       -t, --time T        -A, --account A       -q, --qos Q
  -G, --gpus-per-node N   GPUs per node; also GPUS_PER_NODE=N, i.e. launch.nproc_per_node=N on every node
  -c, --cpus-per-task N   CPUs of each node's task (passed to srun as well: srun no longer inherits it)
  -J, --job-name NAME     (default primus-hydra)
  -o, --output PATH       Slurm's output file (sbatch/srun patterns like %j work)
  --sbatch-arg ARG        one more sbatch argument, verbatim (repeatable; sbatch only)
  --srun-arg ARG          one more srun argument, verbatim (repeatable)
  --env K=V               passed to direct.sh --env on every node (repeatable)
  --srun                  run srun now instead of submitting a batch script
  --dry-run               print the sbatch command and the generated script (or the srun command); run nothing
  -h, --help              this text
USAGE
}

DIRECT=$(repo_root)/launchers/direct.sh
nodes=""
job_name=primus-hydra
partition="" time_limit="" account="" qos="" gpus_per_node="" cpus_per_task="" output=""
sbatch_args=()
srun_args=()
direct_args=()
use_srun=false
dry_run=false

while (($# > 0)); do
    [[ $1 != --*=* ]] || set -- "${1%%=*}" "${1#*=}" "${@:2}"  # --name=value -> --name value
    case $1 in
        -N | --nodes) require_value "$1" $#; nodes=$2; shift 2 ;;
        -p | --partition) require_value "$1" $#; partition=$2; shift 2 ;;
        -t | --time) require_value "$1" $#; time_limit=$2; shift 2 ;;
        -A | --account) require_value "$1" $#; account=$2; shift 2 ;;
        -q | --qos) require_value "$1" $#; qos=$2; shift 2 ;;
        -G | --gpus-per-node) require_value "$1" $#; gpus_per_node=$2; shift 2 ;;
        -c | --cpus-per-task) require_value "$1" $#; cpus_per_task=$2; shift 2 ;;
        -J | --job-name) require_value "$1" $#; job_name=$2; shift 2 ;;
        -o | --output) require_value "$1" $#; output=$2; shift 2 ;;
        --sbatch-arg) require_value "$1" $#; sbatch_args+=("$2"); shift 2 ;;
        --srun-arg) require_value "$1" $#; srun_args+=("$2"); shift 2 ;;
        --env) require_value "$1" $#; direct_args+=(--env "$2"); shift 2 ;;
        --srun) use_srun=true; shift ;;
        --dry-run) dry_run=true; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        *) die "unknown option '$1'; primus_hydra's arguments go after '--' (see --help)" ;;
    esac
done
primus_args=("$@")

[[ -n ${SLURM_JOB_ID:-} ]] && use_srun=true
[[ -n $nodes ]] || nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
[[ $nodes =~ ^[1-9][0-9]*$ ]] || die "--nodes $nodes: expected a positive integer"
[[ -z $gpus_per_node || $gpus_per_node =~ ^[0-9]+$ ]] || die "--gpus-per-node $gpus_per_node: expected an integer"
[[ -z $cpus_per_task || $cpus_per_task =~ ^[1-9][0-9]*$ ]] || die "--cpus-per-task $cpus_per_task: expected a positive integer"
for value in "$job_name" "$partition" "$time_limit" "$account" "$qos" "$output"; do
    [[ $value != *$'\n'* ]] || die "Slurm option values cannot contain a newline: $(shell_quote "$value")"
done

# The options sbatch and srun share, as --name=value words.
slurm_options=("--job-name=$job_name" "--nodes=$nodes" --ntasks-per-node=1)
[[ -z $partition ]] || slurm_options+=("--partition=$partition")
[[ -z $time_limit ]] || slurm_options+=("--time=$time_limit")
[[ -z $account ]] || slurm_options+=("--account=$account")
[[ -z $qos ]] || slurm_options+=("--qos=$qos")
[[ -z $gpus_per_node ]] || slurm_options+=("--gpus-per-node=$gpus_per_node")
[[ -z $output ]] || slurm_options+=("--output=$output")

# The per-node step. --kill-on-bad-exit: one node's failure ends the others instead of leaving them waiting at
# the rendezvous. --cpus-per-task goes to srun itself: since Slurm 22.05 srun does not inherit sbatch's.
step=(--kill-on-bad-exit=1)
[[ -z $cpus_per_task ]] || step+=("--cpus-per-task=$cpus_per_task")
step+=("${srun_args[@]}" "$DIRECT" "${direct_args[@]}" -- "${primus_args[@]}")

if $use_srun; then
    [[ -z $gpus_per_node ]] || export GPUS_PER_NODE=$gpus_per_node
    command=(srun "${slurm_options[@]}" "${step[@]}")
    if $dry_run; then
        [[ -z $gpus_per_node ]] || echo "export GPUS_PER_NODE=$gpus_per_node"
        shell_quote "${command[@]}"
        exit 0
    fi
    exec "${command[@]}"
fi

batch_script() {
    local option
    echo "#!/bin/bash"
    for option in "${slurm_options[@]}"; do
        echo "#SBATCH $option"
    done
    [[ -z $cpus_per_task ]] || echo "#SBATCH --cpus-per-task=$cpus_per_task"
    echo "# generated by launchers/slurm.sh: one task per node, each runs direct.sh (which starts the node's workers)"
    echo "set -euo pipefail"
    [[ -z $gpus_per_node ]] || echo "export GPUS_PER_NODE=$gpus_per_node"
    # computed once, when the job starts, so every node writes the same run dir (on a file system they share)
    # shellcheck disable=SC2016  # expanded by the batch script, not here
    echo 'export PRIMUS_RUN_DIR="${PRIMUS_RUN_DIR:-${PRIMUS_OUTPUT_ROOT:-outputs}/$(date +%Y-%m-%d)/slurm-${SLURM_JOB_ID}}"'
    shell_quote srun "${step[@]}"
}

submit=(sbatch --parsable "${sbatch_args[@]}")
if $dry_run; then
    echo "# $(shell_quote "${submit[@]}") <<'SCRIPT'"
    batch_script
    echo "# SCRIPT"
    exit 0
fi
command -v sbatch >/dev/null 2>&1 || die "sbatch not found: run this on a Slurm login node (or use --dry-run)" 1
job_id=$(batch_script | "${submit[@]}")
echo "submitted job ${job_id%%;*}: $job_name on $nodes node(s)"
