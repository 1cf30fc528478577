"""Primus's pipeline split as this project holds it.

Megatron-LM splits a model's transformer layers over the pipeline stages in one of three ways: evenly (num_layers /
pp, where account_for_embedding/loss_in_pipeline_split count the embedding and the loss as one more layer of the
first and the last stage), with fixed outer stages (decoder_first/last_pipeline_num_layers; the other stages share
the rest evenly), or as a pipeline_model_parallel_layout string. `megatron_stages` says how many transformer layers
each stage builds; `canonical_split` gives the backend.* keys that build the same stages in this project (a layout
that no simpler key holds as backend.pipeline_layout, verbatim), or a one-line PrimusError where Megatron itself
refuses the split or no canonical key can hold it.
"""
from __future__ import annotations

from typing import Optional

from primus_hydra.backends.megatron.pipeline_layout import layout_refusal, layout_stages, virtual_stages
from primus_hydra.config.layout import stage_layers
from primus_hydra.errors import PrimusError

FIRST, LAST = "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"
LAYOUT = "pipeline_model_parallel_layout"
ACCOUNT = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
SPLIT_KEYS = (FIRST, LAST, LAYOUT, *ACCOUNT)
VIRTUAL_STAGES = "backend.virtual_stages_per_pipeline_rank"
PIPELINE_LAYOUT = "backend.pipeline_layout"  # the layout as Megatron reads it (it decides the virtual stages)


def megatron_stages(args: dict) -> Optional[list[int]]:
    """Transformer layers per pipeline stage in layer order (with a layout of v virtual stages per rank: its pp x v
    chunks), as Megatron-LM builds them from these arguments (plain values); None where it refuses them."""
    pp, layers = int(args.get("pipeline_model_parallel_size") or 1), int(args["num_layers"])
    if args.get(LAYOUT) is not None:
        stages = layout_stages(args[LAYOUT])
        if layout_refusal(stages, pp, layers, int(args.get("mtp_num_layers") or 0)):
            return None
        return [stage.count("t") for stage in stages]
    first, last = args.get(FIRST), args.get(LAST)
    virtual = int(args.get("num_virtual_stages_per_pipeline_rank") or 1)
    if first is None and last is None and virtual > 1 and not any(args.get(key) for key in ACCOUNT):
        chunks = pp * virtual  # Megatron's interleaved even split
        return None if layers % chunks else [layers // chunks] * chunks
    if first is None and last is None and pp > 1:
        embedding, loss = (int(bool(args.get(key))) for key in ACCOUNT)
        total = layers + embedding + loss
        if total % pp:
            return None
        share = total // pp
        first, last = (share - embedding if embedding else None), (share - loss if loss else None)
    try:
        return stage_layers(layers, pp, first, last)
    except ValueError:
        return None


def _outer_stages(counts: list[int]) -> Optional[dict]:
    """The first/last stage keys that give these per-stage counts (one stage per rank), or None where the middle
    stages differ or an outer stage has no transformer layer."""
    inner = counts[1:-1]
    if len(set(inner)) > 1 or min(counts) < 1:
        return None
    middle = inner[0] if inner else None
    return {f"backend.{key}": count for key, count in ((FIRST, counts[0]), (LAST, counts[-1])) if count != middle}


def _layout_split(params: dict, pp: int, layers: int) -> dict:
    """A layout as the simplest keys that build its stages: Megatron's even split (virtual stages where its chunks
    are equal), fixed outer stages, else backend.pipeline_layout with Primus's own string."""
    layout = params[LAYOUT]
    shown = layout if isinstance(layout, str) else "|".join(layout_stages(layout))
    if any(params.get(key) for key in (FIRST, LAST, *ACCOUNT)):
        raise PrimusError(f"{LAYOUT}={shown} with {', '.join(key for key in (FIRST, LAST, *ACCOUNT) if params.get(key))}"
                          f": Megatron takes one way of splitting the pipeline, not both")
    stages = layout_stages(layout)
    refusal = layout_refusal(stages, pp, layers, int(params.get("mtp_num_layers") or 0))
    if refusal:
        raise PrimusError(f"{LAYOUT}={shown}: Megatron itself refuses this experiment's layout ({refusal})")
    counts, virtual = [stage.count("t") for stage in stages], virtual_stages(stages, pp)
    asked = params.get("virtual_pipeline_model_parallel_size")
    if asked not in (None, virtual):
        raise PrimusError(f"{LAYOUT}={shown} makes {virtual} virtual stage(s) per rank over pipeline_model_parallel_size"
                          f"={pp}, virtual_pipeline_model_parallel_size={asked}: Megatron itself refuses the conflict")
    mtp_elsewhere = any("m" in stage for stage in stages[:-1])
    if len(set(counts)) == 1 and not mtp_elsewhere:  # equal chunks: Megatron's own even split
        return {VIRTUAL_STAGES: virtual} if virtual > 1 else {}
    outer = _outer_stages(counts) if virtual == 1 and not mtp_elsewhere else None
    return outer if outer is not None else {PIPELINE_LAYOUT: shown, VIRTUAL_STAGES: None}


def suggested_outer_stages(layers: int, pp: int) -> Optional[tuple[int, int]]:
    """(first, last): the heaviest, most even outer stages, no heavier than the middle ones, that make the split
    whole (the last the lighter: it also holds the loss); None where none does."""
    best, limit = None, -(-layers // pp)
    for first in range(1, limit + 1):
        for last in range(1, first + 1):
            try:
                stages = stage_layers(layers, pp, first, last)
            except ValueError:
                continue
            if pp > 2 and stages[1] < first:
                continue
            if best is None or (first + last, last) > (sum(best), best[1]):
                best = (first, last)
    return best


def canonical_split(params: dict) -> dict:
    """The backend.* keys that make Megatron-LM's split of Primus's experiment (its resolved values, plain) in this
    project; PrimusError, one line, where Megatron refuses the split or no canonical key holds it."""
    pp, layers = int(params.get("pipeline_model_parallel_size") or 1), params.get("num_layers")
    if layers is None:
        return {}
    if params.get(LAYOUT) is not None:
        return _layout_split(params, pp, int(layers))
    if params.get(FIRST) is not None or params.get(LAST) is not None:
        return {f"backend.{key}": params[key] for key in (FIRST, LAST) if params.get(key) is not None}
    if pp < 2:
        return {}
    counts = megatron_stages(params)
    if counts is None:
        accounted = [key for key in ACCOUNT if params.get(key)]
        suggestion = suggested_outer_stages(int(layers), pp)
        fix = f"; set e.g. {FIRST}: {suggestion[0]} and {LAST}: {suggestion[1]} in its overrides" \
            f"{' instead of ' + ' and '.join(accounted) if accounted else ''}" if suggestion else ""
        raise PrimusError(f"pipeline_model_parallel_size={pp} does not divide num_layers={layers}"
                          f"{' + ' + ' + '.join(accounted) if accounted else ''} and nothing splits them unevenly "
                          f"({FIRST}/{LAST}, {LAYOUT}): Megatron itself refuses this experiment (Megatron-LM's "
                          f"validate_args and megatron-core's get_num_layers_to_build need num_layers divisible by "
                          f"pipeline_model_parallel_size; its TransformerConfig alone accepts it){fix}")
    outer = _outer_stages(counts) if len(set(counts)) > 1 else {}
    if outer is None:
        raise PrimusError(f"{', '.join(ACCOUNT)}: stages of {'/'.join(map(str, counts))} layers; this project's "
                          f"uneven split needs >= 1 transformer layer in the first and last stage")
    return outer
