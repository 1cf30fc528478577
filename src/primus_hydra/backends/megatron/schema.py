"""backend=megatron's schema (conf/backend/megatron.yaml); stored as schema/backend/megatron. No megatron import."""
from __future__ import annotations

from typing import Optional

from primus_hydra.config.choices import Choice
from primus_hydra.config.schema_run import BackendConfig
from primus_hydra.util.records import record


class TransformerImpl(Choice):
    transformer_engine = "transformer_engine"
    local = "local"


class MegatronDataset(Choice):
    auto = "auto"  # megatron for text and indexed; native for mock and tokens (the same batches as every backend)
    megatron = "megatron"  # megatron.core.datasets: GPTDataset over indexed data (text built into one), MockGPTDataset
    native = "native"  # the project's own batches, index for index those of backend=torch


class RecomputeMethod(Choice):
    uniform = "uniform"
    block = "block"


class RecomputeGranularity(Choice):
    full = "full"
    selective = "selective"


@record
class MegatronBackendConfig(BackendConfig):
    # auto: Megatron-LM's pretrain() when a checkout is found, else core | core: this project's loop on
    # megatron-core | megatron_lm: Megatron-LM's pretrain() | a trainer class path
    trainer: Optional[str] = "auto"
    # interleaved pipeline: model chunks per pipeline rank (Megatron's --num-virtual-stages-per-pipeline-rank)
    virtual_stages_per_pipeline_rank: Optional[int] = None
    # uneven pipeline stages: layers of the first / last stage (Megatron's --decoder-first/last-pipeline-num-layers);
    # the other stages split the rest evenly. null: every stage gets model.num_layers / pp
    decoder_first_pipeline_num_layers: Optional[int] = None
    decoder_last_pipeline_num_layers: Optional[int] = None
    # any split of the layers over the stages: Megatron's --pipeline-model-parallel-layout, e.g. "Et*3|(tt|)*29,m|L"
    # (E embedding, t transformer layer, m MTP layer, L loss; `|` ends a stage; pp x v stages make v virtual stages
    # per rank). Not with the two keys above or virtual_stages_per_pipeline_rank. null: as those say
    pipeline_layout: Optional[str] = None
    # backend.trainer=core's batches: auto | megatron (megatron.core.datasets) | native (backend=torch's, for parity)
    dataset: MegatronDataset = MegatronDataset.auto
    transformer_impl: TransformerImpl = TransformerImpl.transformer_engine
    use_distributed_optimizer: bool = True
    recompute_granularity: Optional[RecomputeGranularity] = None
    # full recompute: Megatron's --recompute-method and --recompute-num-layers (null: uniform, 1 layer per unit)
    recompute_method: Optional[RecomputeMethod] = None
    recompute_num_layers: Optional[int] = None
    tokenizer_type: str = "HuggingFaceTokenizer"
    tokenizer_model: Optional[str] = None
