#!/usr/bin/env bash
# Run primus_hydra on this node: environment setup, then `python -m primus_hydra [args]`. Under Slurm (one task
# per node) it derives the job's nodes, this node's rank and the rendezvous address from Slurm's variables and
# passes them as launch.* overrides; primus_hydra's elastic agent then starts this node's workers.
set -euo pipefail

# shellcheck source=launchers/_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

usage() {
    cat <<'USAGE'
usage: launchers/direct.sh [options] [--] [primus_hydra arguments...]

Runs `$PYTHON -m primus_hydra [arguments]` on this node. Options end at `--` or at the first argument that is
not one of them; everything from there on reaches primus_hydra unchanged.

options:
  --env K=V             export K=V (repeatable; applied last, so it wins over everything else)
  --env-file FILE       source FILE with every assignment exported (repeatable; also $PRIMUS_ENV_FILE)
  --socket-ifname IF    NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (the network interface of the collectives)
  --ib-hca HCA          NCCL_IB_HCA (the InfiniBand/RoCE adapters NCCL/RCCL use, e.g. mlx5_0,mlx5_1)
  --python PATH         the interpreter (default: $PYTHON, else <repo>/.venv/bin/python, else python3)
  --dry-run             print the environment and the command (shell-quoted, one per line); run nothing
  -h, --help            this text

computed (overrides placed before your arguments, so an explicit launch.*=... of yours wins):
  launch.nnodes       $NNODES, else $SLURM_NNODES
  launch.node_rank    $NODE_RANK, else $SLURM_NODEID
  launch.master_addr  under Slurm: the first host of the nodelist (scontrol, else a built-in parser);
                      a $MASTER_ADDR that names another host is an error. Without Slurm: $MASTER_ADDR
  launch.master_port  $MASTER_PORT, else 20000 + ($SLURM_JOB_ID + 7919 * $SLURM_RESTART_COUNT) % 40000
  launch.nproc_per_node  $GPUS_PER_NODE when set
  hydra.run.dir       $PRIMUS_RUN_DIR, else (several Slurm nodes) <outputs>/<day>/slurm-<job>.<step>: one shared dir
USAGE
}

# What the environment held when we started: --dry-run shows what this script changed.
declare -A START_ENV=()
while IFS= read -r name; do
    START_ENV[$name]=${!name-}
done < <(compgen -e)

REPO=$(repo_root)
dry_run=false
python=${PYTHON:-}
env_files=()
env_assignments=()
socket_ifname=""
ib_hca=""
[[ -z ${PRIMUS_ENV_FILE:-} ]] || env_files+=("$PRIMUS_ENV_FILE")

while (($# > 0)); do
    case $1 in
        --env) require_value "$1" $#; env_assignments+=("$2"); shift 2 ;;
        --env=*) env_assignments+=("${1#*=}"); shift ;;
        --env-file) require_value "$1" $#; env_files+=("$2"); shift 2 ;;
        --env-file=*) env_files+=("${1#*=}"); shift ;;
        --socket-ifname) require_value "$1" $#; socket_ifname=$2; shift 2 ;;
        --socket-ifname=*) socket_ifname=${1#*=}; shift ;;
        --ib-hca) require_value "$1" $#; ib_hca=$2; shift 2 ;;
        --ib-hca=*) ib_hca=${1#*=}; shift ;;
        --python) require_value "$1" $#; python=$2; shift 2 ;;
        --python=*) python=${1#*=}; shift ;;
        --dry-run) dry_run=true; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
user_args=("$@")

# --- environment: files, then interface flags, then --env (the most explicit wins) ---
for file in "${env_files[@]}"; do
    [[ -f $file ]] || die "--env-file $file: no such file"
    set -a
    # shellcheck source=/dev/null
    source "$file"
    set +a
done
if [[ -n $socket_ifname ]]; then
    export NCCL_SOCKET_IFNAME=$socket_ifname GLOO_SOCKET_IFNAME=$socket_ifname
fi
[[ -z $ib_hca ]] || export NCCL_IB_HCA=$ib_hca
for assignment in "${env_assignments[@]}"; do
    name=${assignment%%=*}
    [[ $assignment == *=* && $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] ||
        die "--env '$assignment': expected NAME=VALUE with NAME a shell variable name"
    export "$name=${assignment#*=}"
done

if [[ -z $python ]]; then
    if [[ -x $REPO/.venv/bin/python ]]; then python=$REPO/.venv/bin/python; else python=python3; fi
fi

# --- who is this node in the job ---
is_int() { [[ $1 =~ ^[0-9]+$ ]]; }
nnodes=${NNODES:-${SLURM_NNODES:-}}
node_rank=${NODE_RANK:-${SLURM_NODEID:-}}
master_addr=${MASTER_ADDR:-}
master_port=${MASTER_PORT:-}
nodelist=${SLURM_STEP_NODELIST:-${SLURM_NODELIST:-${SLURM_JOB_NODELIST:-}}}
under_slurm=false
[[ -z ${SLURM_JOB_ID:-} || -z $nodelist ]] || under_slurm=true

if $under_slurm; then
    if [[ -n ${SLURM_STEP_NUM_TASKS:-} && -n ${SLURM_STEP_NUM_NODES:-} ]] &&
        ((SLURM_STEP_NUM_TASKS > SLURM_STEP_NUM_NODES)); then
        die "srun step has $SLURM_STEP_NUM_TASKS tasks on $SLURM_STEP_NUM_NODES nodes; direct.sh starts all of a node's workers itself: use srun --ntasks-per-node=1 (launchers/slurm.sh does)"
    fi
    first_host=$(first_host_of_nodelist "$nodelist") || exit 2
    if [[ -n $master_addr && $master_addr != "$first_host" && ${master_addr%%.*} != "$first_host" ]]; then
        die "MASTER_ADDR=$master_addr is not the first node of this Slurm job ($first_host of $nodelist): every node must rendezvous at the same host; unset MASTER_ADDR or set it to $first_host"
    fi
    master_addr=${master_addr:-$first_host}
    if [[ -z $master_port ]]; then
        is_int "$SLURM_JOB_ID" || die "SLURM_JOB_ID=$SLURM_JOB_ID is not a number; set MASTER_PORT"
        master_port=$((20000 + (10#$SLURM_JOB_ID + 7919 * ${SLURM_RESTART_COUNT:-0}) % 40000))
    fi
fi

if [[ -n $nnodes ]] && ! { is_int "$nnodes" && ((10#$nnodes >= 1)); }; then
    die "NNODES=$nnodes: expected a positive integer"
fi
[[ -z $node_rank ]] || is_int "$node_rank" || die "NODE_RANK=$node_rank: expected an integer >= 0"
if [[ -n $node_rank ]] && ((10#$node_rank >= 10#${nnodes:-1})); then
    die "NODE_RANK=$node_rank is not below NNODES=${nnodes:-1}; node ranks run from 0 to NNODES-1"
fi
if [[ -n $master_port ]] && ! { is_int "$master_port" && ((10#$master_port >= 1 && 10#$master_port <= 65535)); }; then
    die "MASTER_PORT=$master_port: expected a port number 1-65535"
fi
[[ -z ${GPUS_PER_NODE:-} ]] || is_int "$GPUS_PER_NODE" || [[ $GPUS_PER_NODE == auto ]] ||
    die "GPUS_PER_NODE=$GPUS_PER_NODE: expected an integer or auto"

overrides=()
[[ -z $nnodes ]] || overrides+=("launch.nnodes=$((10#$nnodes))")
[[ -z $node_rank ]] || overrides+=("launch.node_rank=$((10#$node_rank))")
[[ -z $master_addr ]] || overrides+=("launch.master_addr=$master_addr")
[[ -z $master_port ]] || overrides+=("launch.master_port=$((10#$master_port))")
[[ -z ${GPUS_PER_NODE:-} ]] || overrides+=("launch.nproc_per_node=$GPUS_PER_NODE")

# Several nodes write one run dir (a shared file system): a name every node computes alike, not a timestamp.
wants_run_dir=true
for arg in "${user_args[@]}"; do
    case $arg in hydra.run.dir=* | -m | --multirun) wants_run_dir=false ;; esac
done
run_dir=${PRIMUS_RUN_DIR:-}
if [[ -z $run_dir ]] && $under_slurm && ((10#${nnodes:-1} > 1)); then
    run_dir=${PRIMUS_OUTPUT_ROOT:-outputs}/$(date +%Y-%m-%d)/slurm-$SLURM_JOB_ID.${SLURM_STEP_ID:-0}
fi
if $wants_run_dir && [[ -n $run_dir ]]; then
    overrides+=("hydra.run.dir=$run_dir")
fi

# Inside an srun step primus_hydra would take this one-per-node task for a rank of the job (SLURM_PROCID +
# SLURM_STEP_ID) and train in-process; it is the node's orchestrator instead, so it must not see them.
hidden=()
for name in SLURM_PROCID SLURM_STEP_ID; do
    [[ -z ${!name+set} ]] || hidden+=("$name")
done
((${#hidden[@]} == 0)) || unset "${hidden[@]}"

command=("$python" -m primus_hydra "${overrides[@]}" "${user_args[@]}")

if $dry_run; then
    echo "# environment (set by direct.sh, or passed through from yours)"
    while IFS= read -r name; do
        [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
        value=${!name-}
        if [[ ${START_ENV[$name]+set} == set && ${START_ENV[$name]} == "$value" ]] &&
            ! [[ $name =~ ^(NCCL_|RCCL_|GLOO_|PRIMUS_|HF_|HSA_|HIP_|ROCR_|CUDA_VISIBLE_DEVICES$|OMP_NUM_THREADS$|GPUS_PER_NODE$) ]]; then
            continue
        fi
        if [[ $name =~ (TOKEN|SECRET|PASSWORD|_KEY$) ]]; then
            echo "# $name is set (value hidden)"
        else
            echo "export $(shell_quote "$name=$value")"
        fi
    done < <(compgen -e | LC_ALL=C sort)
    ((${#hidden[@]} == 0)) || echo "unset ${hidden[*]}"
    echo "# command"
    shell_quote "${command[@]}"
    exit 0
fi

exec "${command[@]}"
