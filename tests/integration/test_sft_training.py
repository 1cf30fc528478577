"""module.data.source=sft trains on task=prepare_data's conversations with their loss mask: the targets the mask
leaves out are IGNORED and the loss averages over the others. The proof, in-process on llama_tiny for two steps of
backend=torch: a set that differs only in prompt tokens (a user turn after the last response, which a causal model
cannot see from any response token) gives the identical loss and gradient (its norm, and the next step's loss that
the update decides); a set that differs in one response token does not. backend=megatron (native batches, the mask as
its loss_mask) and backend=torchtitan (its loss ignores the unlearned targets) give torch's curve; a missing mask is
refused with one line before anything runs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers.compose import compose_primus, run_job
from helpers.curves import assert_same_curve, losses
from helpers.libraries import needs_megatron_core
from helpers.overrides import QUIET_LOGS

pytestmark = needs_megatron_core

RUN = ["backend=torch", "model=llama_tiny", "model.vocab_size=384", "module.train_iters=2", "module.warmup_iters=0",
       "module.seq_length=96", "module.micro_batch_size=4", "module.global_batch_size=4", "module.log.interval=1",
       *QUIET_LOGS, "module.checkpoint.save_final=false", "module.data.source=sft"]


def conversations(trailing: str = "and then?", last_response: str = "return [line.rstrip()]") -> list[dict]:
    """Eight conversations (byte tokens: a changed character is a changed token, the lengths unchanged)."""
    return [{"messages": [{"role": "user", "content": f"read file {i}"},
                          {"role": "assistant", "content": last_response if i == 0 else f"open({i}).read()"},
                          {"role": "user", "content": trailing}]} for i in range(8)]


def prepare(root: Path, name: str, records: list) -> Path:
    from primus_hydra.tasks import run_task

    source = root / f"{name}.jsonl"
    source.write_text("".join(json.dumps(record) + "\n" for record in records))
    run_task(compose_primus("task=prepare_data", f"task.input={source}", "task.tokenizer=byte",
                            f"task.out={root / name}", "task.format=chat", "task.workers=1"))
    return root / name


def train(prefix: Path, run_dir: Path, *overrides: str) -> list[dict]:
    run_job(compose_primus(*RUN, f"module.data.path={prefix}", *overrides), run_dir)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sft_sets")
    return {"root": root, "base": prepare(root, "base", conversations()),
            "prompt": prepare(root, "prompt", conversations(trailing="but why??")),
            "response": prepare(root, "response", conversations(last_response="return [line.lstrip()]"))}


def test_the_targets_are_the_masked_in_tokens_only(sets):
    from primus_hydra.backends.common.data import IGNORED, TokenBatches

    batches = TokenBatches("sft", str(sets["base"]), "uint16", 384, 96, seed=1)
    inputs, targets = batches.batch(0, 0, 4)
    for row_inputs, row_targets in zip(inputs.numpy(), targets.numpy()):
        kept = row_targets[row_targets != IGNORED]
        learned = bytes(kept.astype(np.uint8)).decode()  # no eod: the last turn is the user's, not learned
        assert learned.startswith(("return [", "open(")) and learned.endswith("\n") and kept.max() < 256
        assert "user" not in learned and "file" not in learned
        shifted = row_targets[:-1] != IGNORED  # a kept target is the next input token
        assert np.array_equal(row_inputs[1:][shifted], row_targets[:-1][shifted])


def test_changing_only_prompt_tokens_leaves_loss_and_gradient_identical(sets):
    base = train(sets["base"], sets["root"] / "run_base")
    prompt = train(sets["prompt"], sets["root"] / "run_prompt")
    response = train(sets["response"], sets["root"] / "run_response")
    assert [(r["loss"], r["grad_norm"]) for r in prompt] == [(r["loss"], r["grad_norm"]) for r in base]
    assert [r["loss"] for r in response] != [r["loss"] for r in base]  # a response token does count


@pytest.mark.parametrize("backend", ["megatron", "torchtitan"])
def test_megatron_and_torchtitan_train_with_the_mask_on_the_curve_of_torch(sets, backend):
    """megatron: the mask as its loss_mask; torchtitan: its own loss ignores the unlearned targets and averages over
    the global batch's learned ones (with one micro-batch per step, torch's per-micro-batch average)."""
    torch_run = sets["root"] / "run_base"
    if not torch_run.exists():
        train(sets["base"], torch_run)
    train(sets["base"], sets["root"] / f"run_{backend}", f"backend={backend}")
    assert_same_curve(losses(sets["root"] / f"run_{backend}"), losses(torch_run))


def test_a_missing_mask_is_one_line_before_the_run(sets):
    from primus_hydra.errors import ConfigValidationError

    (sets["root"] / "nomask_text_document.bin").write_bytes((sets["root"] / "base_text_document.bin").read_bytes())
    (sets["root"] / "nomask_text_document.idx").write_bytes((sets["root"] / "base_text_document.idx").read_bytes())
    for overrides, expected in [
        ([f"module.data.path={sets['root'] / 'nomask'}"],
         f"module.data.path={sets['root'] / 'nomask'}: no {sets['root'] / 'nomask'}_loss_mask_document.bin "),
    ]:
        with pytest.raises(ConfigValidationError) as raised:
            run_job(compose_primus(*RUN, *overrides), sets["root"] / "refused")
        assert raised.value.failures[0].startswith(expected) and len(raised.value.failures) == 1


def test_packing_fills_each_sequence_with_conversations_back_to_back_and_says_where_attention_crosses_them(sets):
    from primus_hydra.backends.common.data import IGNORED, TokenBatches
    from primus_hydra.backends.common.data_sources import data_source_failures, data_source_warnings

    packed = TokenBatches("sft", str(sets["base"]), "uint16", 384, 200, seed=1, packing=True)
    single = TokenBatches("sft", str(sets["base"]), "uint16", 384, 200, seed=1)
    inputs, targets = packed.batch(0, 0, 2)
    assert (inputs == 256).sum(dim=1).min() >= 2  # two conversations' end ids or more in each sequence, no padding
    assert not (inputs[:, -8:] == 0).all()
    one_inputs, one_targets = single.batch(0, 0, 2)
    ends = int((one_inputs[0] == 256).nonzero()[0])  # the first conversation is the same, with the same mask
    assert (inputs[0, :ends] == one_inputs[0, :ends]).all() and (targets[0, :ends] == one_targets[0, :ends]).all()
    assert (targets != IGNORED).sum() > (one_targets != IGNORED).sum()
    packing = (*RUN, f"module.data.path={sets['base']}", "module.data.packing=true")
    assert data_source_warnings(compose_primus(*packing)) == []  # backend=torch: attention within each conversation
    for override, why in [("module.parallel.pp=2", "(backend=torch with module.parallel.pp=2: the pipeline stages "
                                                   "take no document mask; pp=1 masks it)"),
                          ("backend=megatron", "(backend=megatron: megatron-core's packed-sequence attention needs "
                                               "Transformer Engine or flash-attention kernels, absent on CPU)"),
                          ("backend=torchtitan", "(backend=torchtitan: its batches carry no document boundaries to its "
                                                 "attention)")]:
        assert data_source_warnings(compose_primus(*packing, override)) == [
            f"module.data.packing=true: attention crosses conversation boundaries {why}: a packed conversation "
            f"attends to those before it in its sequence"]
    text = compose_primus(*RUN, "module.data.source=mock", "module.data.packing=true")
    assert data_source_failures(text, blends=False) == [
        "module.data.packing=true: packs the conversations of module.data.source=sft (source=mock already reads its "
        "tokens back to back); unset module.data.packing"]
