#!/usr/bin/env bash
# Run launchers/direct.sh inside a container (docker, podman or apptainer) with the GPUs, the host's IPC and
# network, the repository mounted at the same path, and the collective/Primus/Hugging Face variables forwarded.
set -euo pipefail

# shellcheck source=launchers/_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

usage() {
    cat <<'USAGE'
usage: launchers/container.sh [options] [-- direct.sh options and primus_hydra arguments...]

options:
  --image IMAGE         the image (default: $PRIMUS_IMAGE); apptainer also takes a .sif file or docker://...
  --engine ENGINE       docker | podman | apptainer (default: $CONTAINER_ENGINE, else the first one installed)
  --gpu VENDOR          amd | nvidia | none (default: amd when /dev/kfd exists, nvidia when nvidia-smi or
                        /dev/nvidiactl does, else none)
  -v, --mount SRC:DST   one more bind mount (repeatable; docker/podman options like :ro pass through)
  --no-repo-mount       do not mount this repository (it is mounted at its own path by default)
  -e, --env NAME[=VAL]  forward NAME from here, or set it to VAL (repeatable)
  --python PATH         the interpreter inside the container (default python3; PYTHONPATH gets <repo>/src)
  --name NAME           container name (docker/podman)
  --engine-arg ARG      one more argument for `<engine> run`/`apptainer exec`, verbatim (repeatable)
  --dry-run             print the command line, shell-quoted; run nothing
  -h, --help            this text

forwarded without asking: MASTER_ADDR MASTER_PORT NNODES NODE_RANK GPUS_PER_NODE and every variable named
NCCL_* RCCL_* GLOO_* PRIMUS_* HF_* SLURM_* (direct.sh inside derives the node's rank from Slurm's);
docker/podman get `-e NAME` (the value is read from this environment, never printed), apptainer passes
the whole environment through by default.
USAGE
}

REPO=$(repo_root)
FORWARD_NAMES=(MASTER_ADDR MASTER_PORT NNODES NODE_RANK GPUS_PER_NODE)
FORWARD_PREFIXES='^(NCCL_|RCCL_|GLOO_|PRIMUS_|HF_|SLURM_)'

image=${PRIMUS_IMAGE:-}
engine=${CONTAINER_ENGINE:-}
gpu=${PRIMUS_GPU_VENDOR:-}
mounts=()
env_requests=()
engine_args=()
repo_mount=true
python=python3
name=""
dry_run=false

while (($# > 0)); do
    [[ $1 != --*=* ]] || set -- "${1%%=*}" "${1#*=}" "${@:2}"  # --name=value -> --name value
    case $1 in
        --image) require_value "$1" $#; image=$2; shift 2 ;;
        --engine) require_value "$1" $#; engine=$2; shift 2 ;;
        --gpu) require_value "$1" $#; gpu=$2; shift 2 ;;
        -v | --mount) require_value "$1" $#; mounts+=("$2"); shift 2 ;;
        --no-repo-mount) repo_mount=false; shift ;;
        -e | --env) require_value "$1" $#; env_requests+=("$2"); shift 2 ;;
        --python) require_value "$1" $#; python=$2; shift 2 ;;
        --name) require_value "$1" $#; name=$2; shift 2 ;;
        --engine-arg) require_value "$1" $#; engine_args+=("$2"); shift 2 ;;
        --dry-run) dry_run=true; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        *) die "unknown option '$1'; direct.sh's options and primus_hydra's arguments go after '--' (see --help)" ;;
    esac
done
inner_args=("$@")

if [[ -z $engine ]]; then
    for candidate in docker podman apptainer; do
        if command -v "$candidate" >/dev/null 2>&1; then engine=$candidate; break; fi
    done
    [[ -n $engine ]] || die "no container engine found (docker, podman, apptainer); pass --engine" 1
fi
case $engine in docker | podman | apptainer) ;; *) die "--engine $engine: expected docker, podman or apptainer" ;; esac
[[ -n $image ]] || die "no image: pass --image IMAGE or set PRIMUS_IMAGE"
if [[ -z $gpu ]]; then
    if [[ -e /dev/kfd ]]; then gpu=amd
    elif [[ -e /dev/nvidiactl ]] || command -v nvidia-smi >/dev/null 2>&1; then gpu=nvidia
    else gpu=none
    fi
fi
case $gpu in amd | nvidia | none) ;; *) die "--gpu $gpu: expected amd, nvidia or none" ;; esac
for mount in "${mounts[@]}"; do
    [[ $mount == ?*:?* ]] || die "--mount $mount: expected SRC:DST[:options]"
done

# Inside, the working directory is this one when it lies in the repository (relative outputs/ land where they
# would on the host), else the repository.
workdir=$REPO
[[ $PWD != "$REPO" && $PWD != "$REPO"/* ]] || workdir=$PWD
$repo_mount && mounts=("$REPO:$REPO" "${mounts[@]}")

# Variables: set ones (NAME=VAL) and forwarded ones (NAME: its value here; unset here means not forwarded).
set_vars=("PYTHON=$python" "PYTHONPATH=$REPO/src")
forward=()
while IFS= read -r var; do
    if [[ $var =~ $FORWARD_PREFIXES ]] || [[ " ${FORWARD_NAMES[*]} " == *" $var "* ]]; then forward+=("$var"); fi
done < <(compgen -e | LC_ALL=C sort)
for request in "${env_requests[@]}"; do
    var=${request%%=*}
    [[ $var =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "--env '$request': expected NAME or NAME=VALUE"
    if [[ $request == *=* ]]; then set_vars+=("$request"); else forward+=("$var"); fi
done

inner=(bash "$REPO/launchers/direct.sh" "${inner_args[@]}")
if [[ $engine == apptainer ]]; then
    # apptainer shares the host's network and IPC, and passes this whole environment in (forwarded variables
    # included, their values never on the command line); only the variables set here are named
    command=(apptainer exec)
    case $gpu in amd) command+=(--rocm) ;; nvidia) command+=(--nv) ;; esac
    for mount in "${mounts[@]}"; do command+=(--bind "$mount"); done
    command+=(--pwd "$workdir")
    for assignment in "${set_vars[@]}"; do command+=(--env "$assignment"); done
    command+=("${engine_args[@]}" "$image" "${inner[@]}")
else
    # --init: signals (Slurm's SIGTERM before the time limit) reach primus_hydra, which is not PID 1 then
    command=("$engine" run --rm --init --ipc=host --network=host)
    [[ -z $name ]] || command+=(--name "$name")
    case $gpu in
        amd)
            command+=(--device=/dev/kfd --device=/dev/dri --group-add video --security-opt seccomp=unconfined)
            [[ ! -e /dev/infiniband ]] || command+=(--device=/dev/infiniband)
            ;;
        nvidia)
            if [[ $engine == podman ]]; then command+=(--device nvidia.com/gpu=all); else command+=(--gpus all); fi
            ;;
    esac
    for mount in "${mounts[@]}"; do command+=(-v "$mount"); done
    command+=(-w "$workdir")
    for assignment in "${set_vars[@]}"; do command+=(-e "$assignment"); done
    # -e NAME takes the value from this process's environment: no secret ends up on the command line
    for var in "${forward[@]}"; do command+=(-e "$var"); done
    command+=("${engine_args[@]}" "$image" "${inner[@]}")
fi

if $dry_run; then
    shell_quote "${command[@]}"
    exit 0
fi
exec "${command[@]}"
