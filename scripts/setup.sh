#!/usr/bin/env bash
# Installs everything primus-hydra needs into ./.venv (idempotent; a no-op when nothing changed).
# Usage: bash scripts/setup.sh            (quiet unless something is installed)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.setup-stamp"
want="$(cat "$root/pyproject.toml" "$root/constraints.txt" "$root/setup.py" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
  exit 0
fi
echo "[setup] installing primus-hydra and its dependencies into $venv" >&2
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
# pip without byte-compiling (compileall does it once at the end, on every core); its notes about the local wheel
# folder's links are dropped
pip_install() { "$venv/bin/pip" install -q --no-compile "$@" 2> >(grep -v "is neither a file nor a directory" >&2); }
# torch first and pinned: the CPU build on this kind of machine lies in the local wheel folder.
pip_install -c "$root/constraints.txt" "torch==2.13.0" numpy
# compat mode: src/ on sys.path, so new hydra_plugins.* portions are found without reinstalling
pip_install -c "$root/constraints.txt" --config-settings editable_mode=compat -e "$root[torch,megatron,torchtitan,hf,data,wandb,mlflow,dev]"
# torchtitan 0.3 next to it, outside sys.path, for the tests of the 0.3 config functions (import only: 0.3 needs
# torch >= 2.14 to train); its two libraries that 0.2.2 lacks come with it, no dependency is resolved again.
rm -rf "$venv/torchtitan-0.3"
pip_install --no-deps --target "$venv/torchtitan-0.3" torchtitan==0.3.0 spmd_types==0.2.3 torch_checkpointing==0.1.1
# backend=megatron_bridge: megatron-bridge 0.3.1 is the newest release for Python 3.11. Without its dependencies:
# its transformers<5 pin would replace the project's transformers 5, and transformer-engine, mamba-ssm,
# causal-conv1d and flash-linear-attention build only for GPUs. What its training path imports comes next, by name:
# nvidia-resiliency-ext (in-process restart, imported by pretrain), nvidia-modelopt (distillation, imported by the
# GPT step) and their light dependencies. megatron_bridge.cpu.* (backends/megatron_bridge/cpu_patches.py) does
# the rest on the CPU.
pip_install --no-deps -c "$root/constraints.txt" megatron-bridge nvidia-resiliency-ext nvidia-modelopt \
  psutil defusedxml nvidia-ml-py pulp ninja
# byte-compiled once, on every core: pip compiles each file as it installs it, on one core (~60 s of ~2:20 here);
# a file that does not compile (a package's own test data) is skipped, as pip skips it
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$venv/bin/python" -m compileall -qq -j 0 "$site" "$venv/torchtitan-0.3" || true
echo "$want" > "$stamp"
echo "[setup] done" >&2
