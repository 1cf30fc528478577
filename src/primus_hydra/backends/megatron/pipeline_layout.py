"""Megatron's pipeline_model_parallel_layout read without megatron-core (whose parser imports torch through its
parallel state): which layers each pipeline stage builds, and why megatron-core's PipelineParallelLayerLayout would
refuse a layout. backend.pipeline_layout is checked with these when a job is composed; megatron-core's own class
checks it again with the other library checks (adapter.library_failures), before any worker starts.

A layout is one string of layer letters per stage: E embedding, t transformer layer, m MTP layer, L loss; `|` ends
a stage, `x*n` and `(...)*n` repeat, commas are cosmetic. Its stages, in layer order, are pp x v chunks: chunk i
is virtual stage i // pp of pipeline rank i % pp.
"""
from __future__ import annotations

import re
from typing import Any, Optional

# megatron-core's LayerType names, for a layout written as a list of lists
LAYER_LETTERS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


def layout_stages(layout: Any) -> list[str]:
    """The layout as one string of layer letters per stage, unrolled as megatron-core reads it:
    'Et*2|(t|)*2,L' -> ['Ett', 't', 't', 'L']. A list of lists of layer names reads the same."""
    if isinstance(layout, (list, tuple)):
        return ["".join(LAYER_LETTERS.get(str(name).strip().lower(), "?") for name in stage) for stage in layout]
    text = str(layout).replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda match: match.group(1) * int(match.group(2)), text)
    return text.split("|")


def layout_refusal(stages: list[str], pp: int, layers: int, mtp_layers: int = 0) -> Optional[str]:
    """Why megatron-core refuses this layout for pp stages and a model of `layers` transformer (and `mtp_layers`
    MTP) layers, or None."""
    flat = "".join(stages)
    if len(stages) % pp:
        return f"its {len(stages)} stages are not a multiple of pipeline_model_parallel_size={pp}"
    if set(flat) - set("EtmL"):
        return f"it names {''.join(sorted(set(flat) - set('EtmL')))!r}; its layers are E, t, m and L only"
    if not (flat[:1] == "E" and flat[-1:] == "L" and flat.count("E") == flat.count("L") == 1):
        return "the embedding E comes first and the loss L last, once each"
    if flat.count("t") != layers:
        return f"it holds {flat.count('t')} transformer layers, the model has num_layers={layers}"
    if flat.count("m") != mtp_layers:
        return f"it holds {flat.count('m')} MTP layers, the model has mtp_num_layers={mtp_layers}"
    if "m" in flat and "t" in flat[flat.index("m"):]:
        return "its MTP layers m come after every transformer layer t"
    return None


def virtual_stages(stages: list[str], pp: int) -> int:
    """Model chunks per pipeline rank the layout makes (megatron-core's virtual_pipeline_model_parallel_size)."""
    return max(1, len(stages) // max(1, pp))


def rank_layer_ids(stages: list[str], pp: int) -> list[list[int]]:
    """The transformer layers (0-based ids) each pipeline rank builds, over all its virtual stages."""
    ranks: list[list[int]] = [[] for _ in range(pp)]
    next_id = 0
    for index, stage in enumerate(stages):
        count = stage.count("t")
        ranks[index % pp].extend(range(next_id, next_id + count))
        next_id += count
    return ranks


def pipeline_layout_failures(backend: Any, num_layers: int, pp: int, grad_accum: int) -> list[str]:
    """backend.pipeline_layout against the model, the layout and the other split keys: one line per failure (what
    megatron-core's TransformerConfig and its interleaved schedule would refuse)."""
    layout = backend.get("pipeline_layout")
    if layout is None:
        return []
    shown = f"backend.pipeline_layout={layout}"
    others = [key for key in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                              "virtual_stages_per_pipeline_rank") if backend.get(key) is not None]
    if others:
        return [f"{shown}: not with {', '.join(f'backend.{key}' for key in others)} (the layout alone splits the "
                f"layers and makes the virtual stages); set {' '.join(f'backend.{key}=null' for key in others)}"]
    stages = layout_stages(layout)
    mtp = int((backend.get("extra_args") or {}).get("mtp_num_layers") or 0)
    refusal = layout_refusal(stages, pp, num_layers, mtp)
    if refusal:
        return [f"{shown}: megatron-core refuses it with module.parallel.pp={pp}: {refusal}"]
    virtual = virtual_stages(stages, pp)
    if virtual > 1 and pp < 2:
        return [f"{shown}: {virtual} virtual stages need module.parallel.pp >= 2"]
    if virtual > 1 and grad_accum < pp:
        return [f"{shown}: its {virtual} virtual stages per rank run the interleaved schedule, which needs at least "
                f"pp={pp} micro-batches per step, the layout gives {grad_accum}; raise module.global_batch_size or "
                f"lower module.micro_batch_size"]
    return []


def megatron_core_layout_failures(args: dict) -> list[str]:
    """The translated arguments' layout through megatron-core's own PipelineParallelLayerLayout (it imports torch: a
    library check), which also holds the rules read above leaves out (where MTP layers may sit): one line."""
    layout = args.get("pipeline_model_parallel_layout")
    if layout is None:
        return []
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    try:
        PipelineParallelLayerLayout(layout, int(args["pipeline_model_parallel_size"])).validate_layer_layout(
            num_layers=int(args["num_layers"]), mtp_num_layers=args.get("mtp_num_layers"))
    except (AssertionError, ValueError, NotImplementedError) as error:
        reason = str(error).splitlines()[0].strip() if str(error).strip() else type(error).__name__
        return [f"backend.pipeline_layout={layout}: megatron-core's PipelineParallelLayerLayout refuses it: {reason}"]
    return []
