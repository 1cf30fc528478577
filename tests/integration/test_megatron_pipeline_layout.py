"""backend.pipeline_layout: Megatron's pipeline_model_parallel_layout through the CLI. An uneven, interleaved layout
over 2 CPU processes (pp=2, 2 virtual stages per rank of 1/2/2/1 layers) trains megatron-core's model split as the
layout says and follows the one-process curve of the same model (fp32, 5 steps, 1e-4 relative)."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.cli import primus
from helpers.curves import assert_same_curve, eval_losses, losses
from helpers.libraries import needs_megatron_core
from helpers.overrides import SHORT_RUN

pytestmark = [pytest.mark.slow, needs_megatron_core]

SIX_LAYERS = [*SHORT_RUN, "module.eval_interval=5", "module.eval_iters=2", "backend=megatron", "model.num_layers=6"]
LAYOUT = "Et|tt|tt|t,L"  # chunks in layer order: rank 0 (E + 1 layer), rank 1 (2), rank 0 (2), rank 1 (1, loss)
# llama_tiny's transformer layer: attention (q, o: 256x256; k, v: 256x128), SwiGLU (3 x 256x688), two norms
LAYER = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256


def train(run_dir: Path, *args: str) -> Path:
    result = primus(f"hydra.run.dir={run_dir}", *SIX_LAYERS, *args, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_an_uneven_interleaved_layout_follows_the_one_process_curve(tmp_path):
    one = train(tmp_path / "one" / "run")
    split = train(tmp_path / "split" / "run", "launch.nproc_per_node=2", "module.parallel.pp=2",
                  f"backend.pipeline_layout='{LAYOUT}'")
    assert_same_curve(losses(split), losses(one))
    assert_same_curve(eval_losses(split), eval_losses(one))
    rank_logs = [(split / "logs" / f"rank_{rank}.log").read_text() for rank in (0, 1)]
    assert "pipeline rank 0: transformer layers 1 | 4,5" in rank_logs[0]
    assert "pipeline rank 1: transformer layers 2,3 | 6" in rank_logs[1]
    # rank 0: the embedding and 3 layers; rank 1: 3 layers, the final norm and the output layer
    assert f"this rank holds {256 * 256 + 3 * LAYER:,}" in rank_logs[0]
    assert f"this rank holds {3 * LAYER + 256 + 256 * 256:,}" in rank_logs[1]


def test_a_layout_megatron_refuses_stops_before_any_worker_in_one_line(tmp_path):
    result = primus(f"hydra.run.dir={tmp_path / 'run'}", *SIX_LAYERS, "launch.nproc_per_node=2",
                    "module.parallel.pp=2", "backend.pipeline_layout='Et|tt|tt|tt,L'", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: backend.pipeline_layout=Et|tt|tt|tt,L: megatron-core refuses it with module.parallel.pp=2: it holds 7 "
        "transformer layers, the model has num_layers=6"]
    assert not (tmp_path / "run" / "logs" / "rank_0.log").exists()


# (layout, pp, transformer layers, MTP layers): Primus's shapes, and ones megatron-core refuses
LAYOUTS = [("Et*1|t*1|" + "t*2|" * 29 + "t*1,L", 16, 61, 0), ("Et*7|t*8|t*8|t*8|t*8|t*8|t*8|t*7,L", 4, 62, 0),
           ("Et*5|" + "t*6|" * 14 + "t*5,L", 4, 94, 0), ("Et*3|(tt|)*29,m|L", 8, 61, 1), (LAYOUT, 2, 6, 0),
           ("Et*1|t*1|" + "t*2|" * 29 + "t*1,L", 16, 61, 1), ("Et|tt|tt,L", 2, 5, 0), ("Et|tt|tt|tt,L", 2, 6, 0),
           ("tE|tt|tt|t,L", 2, 6, 0), ("Et|tt|tt|t|L", 2, 6, 0)]
MEGATRON_CORE_READS = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from megatron.core.transformer.enums import LayerType
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
out = []
for layout, pp, layers, mtp in json.loads(sys.argv[1]):
    try:
        parsed = PipelineParallelLayerLayout(layout, pp)
        parsed.validate_layer_layout(num_layers=layers, mtp_num_layers=mtp or None)
    except (AssertionError, ValueError):
        out.append(None)
        continue
    ranks, next_id = [[] for _ in range(pp)], 0
    for vpp in range(parsed.virtual_pipeline_model_parallel_size):  # get_layer_offset's order
        for rank in range(pp):
            count = parsed.layout[rank][vpp].count(LayerType.decoder)
            ranks[rank] += list(range(next_id, next_id + count))
            next_id += count
    out.append(ranks)
print(json.dumps(out))
"""


def test_the_layout_reader_agrees_with_megatron_core():
    import json
    import subprocess
    import sys

    from primus_hydra.backends.megatron.pipeline_layout import layout_refusal, layout_stages, rank_layer_ids

    done = subprocess.run([sys.executable, "-c", MEGATRON_CORE_READS, json.dumps(LAYOUTS)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ours = [None if layout_refusal(layout_stages(layout), pp, layers, mtp) else
            rank_layer_ids(layout_stages(layout), pp) for layout, pp, layers, mtp in LAYOUTS]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ours
    assert ours.count(None) == 5


def test_megatron_core_accepts_the_config_of_layers_pp_does_not_divide_but_builds_no_stage():
    """deepseek_v4_flash's 43 layers on pp=8: TransformerConfig takes them, get_num_layers_to_build refuses (and
    Megatron-LM's validate_args before it): why the import refuses such an experiment."""
    import subprocess
    import sys

    script = ("import warnings; warnings.filterwarnings('ignore'); import torch\n"
              "from megatron.core.transformer.transformer_config import TransformerConfig\n"
              "from megatron.core.transformer.transformer_block import get_num_layers_to_build\n"
              "config = TransformerConfig(num_layers=43, hidden_size=64, num_attention_heads=4, "
              "pipeline_model_parallel_size=8, pipeline_dtype=torch.float32)\n"
              "try:\n    get_num_layers_to_build(config, pp_rank=0)\nexcept AssertionError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "num_layers should be divisible by pipeline_model_parallel_size"


def test_where_megatron_core_refuses_mtp_layers_is_one_line_before_any_worker(tmp_path):
    """MTP layers in the first virtual stage of a rank: the layout reader passes it, megatron-core's own class
    refuses it with the other library checks."""
    result = primus(f"hydra.run.dir={tmp_path / 'run'}", *SIX_LAYERS, "launch.nproc_per_node=2",
                    "module.parallel.pp=2", "backend.pipeline_layout='Ettt|tttm||L'",
                    "+backend.extra_args.mtp_num_layers=1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: backend.pipeline_layout=Ettt|tttm||L: megatron-core's PipelineParallelLayerLayout refuses it: "
        "Currently we restrict that the MTP should be always in the last"]
