"""backend.pipeline_layout (Megatron's pipeline_model_parallel_layout) with backend=megatron: read without
megatron-core, checked when the job is prepared (one line per bad value), translated to Megatron's argument, and
projected stage by stage."""
from __future__ import annotations

import pytest

from primus_hydra.backends.megatron.args import build_megatron_args
from primus_hydra.backends.megatron.pipeline_layout import layout_refusal, layout_stages, rank_layer_ids, virtual_stages
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.projection.layout import layout_from_config
from primus_hydra.projection.memory import stage_split

SIX_LAYERS_PP2 = ["backend=megatron", "model=llama_tiny", "model.num_layers=6", "module.parallel.pp=2",
                  "launch.nproc_per_node=2", "module.micro_batch_size=2", "module.global_batch_size=8"]
LAYOUT = "Et|tt|tt|t,L"


def test_a_layout_unrolls_as_megatron_core_reads_it():
    assert layout_stages("Et*2|(t|)*2,L") == ["Ett", "t", "t", "L"]
    assert layout_stages([["embedding", "decoder"], ["decoder", "loss"]]) == ["Et", "tL"]


def test_each_rank_holds_the_layers_of_its_virtual_stages():
    stages = layout_stages(LAYOUT)
    assert virtual_stages(stages, 2) == 2
    assert rank_layer_ids(stages, 2) == [[0, 3, 4], [1, 2, 5]]


@pytest.mark.parametrize("layout, reason", [
    ("Et|tt|t,L", "its 3 stages are not a multiple of pipeline_model_parallel_size=2"),
    ("Et|tx|tt|t,L", "it names 'x'; its layers are E, t, m and L only"),
    ("tE|tt|tt|t,L", "the embedding E comes first and the loss L last, once each"),
    ("Et|tt|tt|tt,L", "it holds 7 transformer layers, the model has num_layers=6"),
    ("Et|tt|tt|tm,L", "it holds 1 MTP layers, the model has mtp_num_layers=0"),
])
def test_a_layout_megatron_core_refuses_says_why(layout, reason):
    assert layout_refusal(layout_stages(layout), 2, 6) == reason


def failures_for(compose_config, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config(*SIX_LAYERS_PP2, *overrides), world_size=2, launched=True, trains=False)
    return info.value.failures


@pytest.mark.parametrize("overrides, expected", [
    (["backend.pipeline_layout='Et|tt|tt|tt,L'"],
     "backend.pipeline_layout=Et|tt|tt|tt,L: megatron-core refuses it with module.parallel.pp=2: it holds 7 "
     "transformer layers, the model has num_layers=6"),
    ([f"backend.pipeline_layout='{LAYOUT}'", "backend.decoder_last_pipeline_num_layers=2",
      "backend.virtual_stages_per_pipeline_rank=3"],
     f"backend.pipeline_layout={LAYOUT}: not with backend.decoder_last_pipeline_num_layers, "
     f"backend.virtual_stages_per_pipeline_rank (the layout alone splits the layers and makes the virtual stages); "
     f"set backend.decoder_last_pipeline_num_layers=null backend.virtual_stages_per_pipeline_rank=null"),
    ([f"backend.pipeline_layout='{LAYOUT}'", "module.global_batch_size=2"],
     f"backend.pipeline_layout={LAYOUT}: its 2 virtual stages per rank run the interleaved schedule, which needs at "
     f"least pp=2 micro-batches per step, the layout gives 1; raise module.global_batch_size or lower "
     f"module.micro_batch_size"),
])
def test_a_bad_layout_is_one_line_when_the_job_is_prepared(compose_config, overrides, expected):
    assert failures_for(compose_config, *overrides) == [expected]


def test_a_layout_that_pp_does_not_divide_evenly_is_prepared_and_translated(compose_config):
    cfg = compose_config(*SIX_LAYERS_PP2, "model.num_layers=7", "backend.pipeline_layout='Ett|tt|tt|t,L'")
    job = prepare(cfg, world_size=2, launched=True, trains=False)
    args = build_megatron_args(job.cfg, job.layout)
    assert args["pipeline_model_parallel_layout"] == "Ett|tt|tt|t,L"
    assert "num_virtual_stages_per_pipeline_rank" not in {key for key, value in args.items() if value is not None}


def test_without_a_layout_megatron_gets_none(compose_config):
    job = prepare(compose_config(*SIX_LAYERS_PP2), world_size=2, launched=True, trains=False)
    assert "pipeline_model_parallel_layout" not in build_megatron_args(job.cfg, job.layout)


def test_the_projection_counts_each_rank_s_layers_from_the_layout(compose_config):
    cfg = compose_config(*SIX_LAYERS_PP2, "model.num_layers=7", "backend.pipeline_layout='Ett|tt|tt|t,L'")
    layout = layout_from_config(cfg, 2, 2)
    assert (layout.vpp, layout.pipeline_layout) == (2, "Ett|tt|tt|t,L")
    assert stage_split(cfg.model, layout) == [[0, 1, 4, 5], [2, 3, 6]]


def test_the_search_replaces_a_layout_made_for_its_own_pp(compose_config):
    from primus_hydra.projection.project import workload_of
    from primus_hydra.projection.search import candidate_layouts, overrides_for

    cfg = compose_config(*SIX_LAYERS_PP2, "model.num_layers=7", "backend.pipeline_layout='Ett|tt|tt|t,L'")
    base = layout_from_config(cfg, 2, 2)
    candidates = list(candidate_layouts(workload_of(cfg), base, 2))
    assert candidates and {layout.pipeline_layout for layout in candidates} == {None}
    assert overrides_for(candidates[0], base.pipeline_layout is not None)[-2:] == [
        "backend.pipeline_layout=null", "backend.recompute_granularity=null"]
    assert "backend.pipeline_layout=null" not in overrides_for(candidates[0])
