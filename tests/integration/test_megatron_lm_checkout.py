"""With a Megatron-LM checkout (backend.path / $BACKEND_PATH / third_party/Megatron-LM, or $PRIMUS_MEGATRON_LM):
the translated arguments of llama3_8b on 8 GPUs pass Megatron-LM's own parse_args and validate_args as flags, and
a renamed argument is refused in one line by the checkout's parser. Skipped, saying why, without a checkout
(none ships with the project: Megatron-LM is not on PyPI) or without its import requirements."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.compose import REPO, compose_primus
from helpers.libraries import needs_megatron_core
from primus_hydra.backends.base import load_adapter
from primus_hydra.config.layout import parallel_layout

pytestmark = needs_megatron_core


def find_checkout() -> Path:
    for candidate in (os.environ.get("PRIMUS_MEGATRON_LM"), os.environ.get("BACKEND_PATH"),
                      REPO / "third_party" / "Megatron-LM"):
        if candidate and (Path(candidate) / "megatron" / "training" / "__init__.py").is_file():
            return Path(candidate)
    pytest.skip("no Megatron-LM checkout: set PRIMUS_MEGATRON_LM=<dir> (tag core_v<installed megatron-core>)")


@pytest.fixture(scope="module")
def checkout() -> Path:
    root = find_checkout()
    for module in ("six", "regex", "pydantic", "triton"):
        pytest.importorskip(module, reason=f"Megatron-LM's arguments need {module}")
    return root


LLAMA3_8B = ("backend=megatron", "model=llama3_8b", "launch.nproc_per_node=8", "module.seq_length=1024",
             "module.global_batch_size=64", "module.data.source=mock", "backend.trainer=megatron_lm")
VALIDATE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from megatron.training.arguments import parse_args, validate_args
sys.argv = ["pretrain_gpt.py", *json.loads(sys.argv[2])]
args = parse_args()
validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
print(json.dumps({"dp": args.data_parallel_size, "layers": args.num_layers, "eps": args.layernorm_epsilon}))
"""


def adapter_for(root: Path, *overrides: str):
    cfg = compose_primus(*LLAMA3_8B, f"backend.path={root}", *overrides)
    adapter = load_adapter(cfg, parallel_layout(cfg, 8))
    adapter.runs_on_gpu = True  # as the orchestrator finds an 8-GPU node
    return adapter


def test_the_flags_pass_megatron_lms_own_parse_and_validate(checkout):
    from primus_hydra.backends.megatron.megatron_lm import command_line, megatron_lm_parser

    adapter = adapter_for(checkout)
    assert adapter.trainer_name == "megatron_lm" and adapter._megatron_lm_failures() == []
    argv = command_line(adapter._arguments_after_patches(), megatron_lm_parser(checkout))
    result = subprocess.run([sys.executable, "-c", VALIDATE, str(checkout), json.dumps(argv)], capture_output=True,
                            text=True, env={**os.environ, "RANK": "0", "WORLD_SIZE": "8"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {"dp": 8, "layers": 32, "eps": 1e-5}


def test_an_argument_the_checkout_does_not_know_is_one_line(checkout):
    adapter = adapter_for(checkout, "+backend.extra_args.no_such_megatron_flag=1")
    assert adapter._megatron_lm_failures() == [
        "backend_args.no_such_megatron_flag: Megatron-LM's parser has no argument that stores into "
        "'no_such_megatron_flag' (renamed or removed in this checkout); fix backend.extra_args or use backend.trainer=core"]
