"""Every llama-family zoo preset torchtitan's llama3 can build (untied embeddings), and every qwen3 and deepseek one
(torchtitan's qwen3, deepseek_v3, llama4 and gpt_oss, MoE, latent attention and gpt-oss's biases and sinks included), translated (args.py model_args over the flavor, as the trainer does) and built by torchtitan itself on the
meta device, has exactly the parameter count of the project's model math; the tied llamas are refused in one line
before any worker."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from helpers.compose import CONF_DIR, REPO
from helpers.libraries import needs_torchtitan

pytestmark = [pytest.mark.slow, needs_torchtitan]

LLAMAS = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml")
                if yaml.safe_load(path.read_text())["family"] == "llama")
UNTIED = [name for name in LLAMAS if not yaml.safe_load((CONF_DIR / "model" / f"{name}.yaml").read_text()).get("tie_embeddings")]
QWEN3 = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml")
               if yaml.safe_load(path.read_text())["family"] == "qwen3")
DEEPSEEK = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml")
                  if yaml.safe_load(path.read_text())["family"] == "deepseek")
LLAMA4 = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml")
                if yaml.safe_load(path.read_text())["family"] == "llama4")
GPT_OSS = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml")
                 if yaml.safe_load(path.read_text())["family"] == "gpt_oss")
COUNT_ALL = """
import json, sys
sys.path.insert(0, "tests")
import torch
from helpers.compose import compose_primus
from primus_hydra.backends.torchtitan.args import build_torchtitan_job_config
from primus_hydra.backends.torchtitan.trainer import _with_overrides, base_flavor
from primus_hydra.config.layout import parallel_layout
from primus_hydra.config.model_math import count_parameters
from torchtitan.config import JobConfig
from torchtitan.protocols.train_spec import get_train_spec

counts = {}
for name in sys.argv[1:]:
    cfg = compose_primus("backend=torchtitan", f"model={name}", "module.data.source=mock")
    job = build_torchtitan_job_config(cfg, None, parallel_layout(cfg, 1))
    spec = get_train_spec(job["model"]["name"])
    args = _with_overrides(spec.model_args[base_flavor(spec, job["model"]["flavor"], None)], job["model_args"])
    args.update_from_config(JobConfig())  # what torchtitan's Trainer does first (deepseek_v3 reads its MoE choices there)
    with torch.device("meta"):
        model = spec.model_cls(args)
    # torchtitan keeps DeepSeek-V3's expert bias (e_score_correction_bias) as a buffer, not a parameter
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("expert_bias"))
    counts[name] = [job["model"]["flavor"], sum(p.numel() for p in model.parameters()) + bias,
                    count_parameters(cfg.model)]
print(json.dumps(counts))
"""


@pytest.fixture(scope="module")
def torchtitan_counts() -> dict[str, list]:
    result = subprocess.run([sys.executable, "-c", COUNT_ALL, *UNTIED, *QWEN3, *DEEPSEEK, *LLAMA4, *GPT_OSS], capture_output=True, text=True, cwd=REPO,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_the_llama_family_is_counted():
    assert len(LLAMAS) == 11 and {"llama3_8b", "llama3.1_405b", "llama2_7b", "llama_tiny"} <= set(UNTIED)
    assert set(LLAMAS) - set(UNTIED) == {"llama3.2_1b", "llama3.2_3b"}


@pytest.mark.parametrize("name", UNTIED + QWEN3 + DEEPSEEK + LLAMA4 + GPT_OSS)
def test_torchtitan_builds_the_preset_with_its_model_math_count(torchtitan_counts, name):
    flavor, built, model_math = torchtitan_counts[name]
    assert built == model_math, f"{name} (flavor {flavor}): torchtitan {built:,} vs model math {model_math:,}"
    if name == "llama3_8b":
        assert (flavor, built) == ("8B", 8_030_261_248)
    if name == "qwen3_8b":  # Qwen/Qwen3-8B's safetensors metadata
        assert (flavor, built) == ("8B", 8_190_735_360)
    if name == "deepseek_v3":  # the count conf/model/deepseek_v3.yaml documents
        assert (flavor, built) == ("671B", 671_026_419_200)
    if name == "deepseek_v2_lite":
        assert (flavor, built) == ("16B", 15_706_484_224)
    if name == "llama4_17bx128e":  # the count conf/model/llama4_17bx128e.yaml documents
        assert (flavor, built) == ("17bx128e", 400_711_852_032)
