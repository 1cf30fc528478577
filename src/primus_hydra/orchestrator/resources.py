"""GPUs visible to this process, found without importing torch or initialising CUDA/HIP.

Visible-devices variables win (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES); otherwise
`nvidia-smi -L` or `amd-smi list` / `rocm-smi --showid`, each with a timeout. Any failure means 0 GPUs.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess

VISIBLE_DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
PROBE_TIMEOUT_S = 5


def _count_from_mask(mask: str) -> int:
    entries = [entry.strip() for entry in mask.split(",") if entry.strip()]
    if any(entry in ("-1", "none", "NoDevFiles") for entry in entries):
        return 0
    return len(entries)


def _probe(command: list[str], prefix: str) -> int:
    if shutil.which(command[0]) is None:
        return 0
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in output.splitlines() if line.strip().startswith(prefix))


@functools.lru_cache(maxsize=1)
def count_visible_gpus() -> int:
    for variable in VISIBLE_DEVICE_VARIABLES:
        if variable in os.environ:
            return _count_from_mask(os.environ[variable])
    nvidia = _probe(["nvidia-smi", "-L"], "GPU ")
    if nvidia:
        return nvidia
    return _probe(["amd-smi", "list"], "GPU:") or _probe(["rocm-smi", "--showid"], "GPU[")


def resolve_nproc_per_node(value, device: str = "auto") -> int:
    """launch.nproc_per_node: an explicit integer wins; auto = visible GPUs (unless platform.device=cpu), else 1."""
    if str(value) == "auto":
        return (count_visible_gpus() if device != "cpu" else 0) or 1
    return int(value)
