"""The dtypes a benchmark may ask for, by their short names, and which ones a device runs."""
from __future__ import annotations

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}


def supported(device: torch.device) -> list[str]:
    """fp32, bf16 and fp16 everywhere torch runs them; fp8 GEMMs (torch._scaled_mm) on CUDA compute capability
    8.9+ and on ROCm's MI300 generation (gfx94x / gfx95x)."""
    names = ["fp32", "bf16", "fp16"]
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        arch = getattr(props, "gcnArchName", "")
        if (props.major, props.minor) >= (8, 9) or arch.startswith(("gfx94", "gfx95")):
            names.append("fp8")
    return names
