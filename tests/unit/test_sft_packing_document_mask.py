"""module.data.packing with backend=torch: attention stays within each packed conversation. Two conversations packed
into one sequence give, token by token, the logits each gives alone (GQA and MLA attention), and the packed
micro-batch's masked loss is the token-weighted masked loss of the same conversations unpacked, within 1e-5; without
the documents the packed loss is another one (the conversations would attend to each other)."""
from __future__ import annotations

import json

import pytest
import torch
from test_generation import DEEPSEEK_V3_TINY  # noqa: E402

from primus_hydra.backends.common.data import IGNORED, TokenBatches, token_loss
from primus_hydra.backends.torch.model import build_model_on_meta, materialize

VOCAB = 384  # the byte tokenizer's 256 bytes and its special ids
MODELS = {"gqa": ["model=llama_tiny", "model.num_kv_heads=2"], "mla": DEEPSEEK_V3_TINY}


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """Three chat conversations of the same token length (byte tokens; only the digit differs)."""
    from helpers.compose import compose_primus
    from primus_hydra.tasks import run_task

    root = tmp_path_factory.mktemp("sft_packing")
    records = [{"messages": [{"role": "user", "content": f"read file {i}"},
                             {"role": "assistant", "content": f"open({i}).read()"}]} for i in range(3)]
    (root / "chat.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    run_task(compose_primus("task=prepare_data", f"task.input={root / 'chat.jsonl'}", "task.tokenizer=byte",
                            f"task.out={root / 'chat'}", "task.format=chat", "task.workers=1"))
    return str(root / "chat")


def two_conversations(prefix: str) -> tuple:
    """A packed sequence of exactly two whole conversations, and (inputs, targets) of each alone (unpacked, padded)."""
    length = TokenBatches("sft", prefix, "uint16", VOCAB, 8, seed=0).documents.offsets[1]  # every conversation's
    seq_length = 2 * int(length) - 1
    packed = TokenBatches("sft", prefix, "uint16", VOCAB, seq_length, seed=0, packing=True).batch(0, 0, 1)
    alone_inputs, alone_targets = TokenBatches("sft", prefix, "uint16", VOCAB, seq_length, seed=0).batch(0, 0, 16)
    assert packed.documents.tolist() == [[0] * length + [1] * (length - 1)]
    rows = [next(row for row in range(16) if torch.equal(alone_inputs[row, :len(segment)], segment))
            for segment in (packed[0][0, :length], packed[0][0, length:])]
    assert not torch.equal(alone_inputs[rows[0]], alone_inputs[rows[1]])  # two conversations, not one twice
    return packed, alone_inputs[rows], alone_targets[rows], int(length)


def tiny(compose_config, family: str):
    model_cfg = compose_config(*MODELS[family], f"model.vocab_size={VOCAB}").model
    return materialize(build_model_on_meta(model_cfg), torch.device("cpu"), seed=0).eval()


@pytest.mark.parametrize("family", MODELS)
def test_each_packed_conversation_has_the_logits_it_has_alone(compose_config, prefix, family):
    model = tiny(compose_config, family)
    batch, _, _, length = two_conversations(prefix)
    inputs = batch[0]
    with torch.no_grad():
        packed = model(inputs, documents=batch.documents)[0]
        first, second = model(inputs[:, :length])[0], model(inputs[:, length:])[0]
        crossing = model(inputs)[0]
    torch.testing.assert_close(packed[:length], first, atol=1e-5, rtol=0)
    torch.testing.assert_close(packed[length:], second, atol=1e-5, rtol=0)
    assert not torch.allclose(crossing[length:], second, atol=1e-3)  # plain causal attention sees the first one


def test_the_packed_loss_is_the_token_weighted_loss_of_the_conversations_alone(compose_config, prefix):
    model = tiny(compose_config, "gqa")
    packed, alone_inputs, alone_targets, length = two_conversations(prefix)
    inputs, targets = packed
    assert targets[0, length - 1] == IGNORED  # the next conversation's first token is no target
    assert (targets != IGNORED).sum() == (alone_targets != IGNORED).sum()
    with torch.no_grad():
        packed_loss = token_loss(model(inputs, documents=packed.documents), targets, masked=True)
        alone_loss = token_loss(model(alone_inputs), alone_targets, masked=True)  # over both rows' targets
        crossing_loss = token_loss(model(inputs), targets, masked=True)
    assert abs(packed_loss.item() - alone_loss.item()) < 1e-5
    assert abs(crossing_loss.item() - alone_loss.item()) > 1e-4
