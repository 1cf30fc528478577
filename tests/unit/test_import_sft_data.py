"""Primus's SFT dataset keys (sft_dataset_name, _split, sft_conversation_format, packing) as module.data.source=sft
and the commands that make its data: one prefix per dataset, split and tokenizer; Primus's formatter names mapped
onto task=prepare_data's formats; a formatter Primus lacks is one line."""
from __future__ import annotations

import pytest

from primus_hydra.errors import PrimusError
from primus_hydra.migrate.mapping import Imported, _megatron_data

SFT = {"stage": "sft", "mock_data": False, "sft_dataset_name": "rajpurkar/squad", "sft_conversation_format": "squad",
       "sft_dataset_split": "validation", "tokenizer_model": "NousResearch/Meta-Llama-3-8B",
       "enable_packed_sequences": True, "use_packed_attention": True}


def mapped(**changes) -> Imported:
    imported = Imported(backend="megatron", model=None)
    _megatron_data({**SFT, **changes}, imported)
    return imported


def test_a_hub_dataset_becomes_an_sft_prefix_per_split_and_tokenizer_with_the_commands_that_make_it():
    imported = mapped()
    prefix = "data/sft/rajpurkar_squad_validation.Meta-Llama-3-8B"
    assert imported.canonical == {"module.data.source": "sft", "module.data.path": prefix, "module.data.packing": True}
    assert {"sft_dataset_name", "sft_conversation_format", "sft_dataset_split", "enable_packed_sequences",
            "use_packed_attention"} <= imported.consumed
    data, packed = imported.warnings
    assert (f"datasets.load_dataset('rajpurkar/squad', split='validation').to_json('{prefix}.jsonl')" in data
            and f"task=prepare_data task.input={prefix}.jsonl task.format=squad "
                f"task.tokenizer=NousResearch/Meta-Llama-3-8B task.out={prefix}" in data
            and "a local folder holding NousResearch/Meta-Llama-3-8B's tokenizer.json" in data)
    assert "attention here crosses the packed conversations' boundaries" in packed
    assert mapped(tokenizer_model="Qwen/Qwen3-8B").canonical["module.data.path"] != prefix  # never shared tokens


@pytest.mark.parametrize("primus_format, ours", [("alpaca", "alpaca"), ("messages", "chat"), ("chatml", "chat"),
                                                 ("bridge_squad", "squad")])
def test_primus_formatters_map_onto_prepare_datas_formats(primus_format, ours):
    imported = mapped(sft_conversation_format=primus_format, enable_packed_sequences=False)
    assert f"task.format={ours} " in imported.warnings[0] and "module.data.packing" not in imported.canonical
    assert any("chat template" in warning for warning in imported.warnings) == (ours == "chat")


def test_a_local_jsonl_is_read_as_it_is_and_mock_data_does_not_hide_it():
    imported = mapped(sft_dataset_name="/data/my set.jsonl", mock_data=True, enable_packed_sequences=False)
    assert imported.canonical["module.data.path"] == "data/sft/my_set.Meta-Llama-3-8B"
    assert "task.input='/data/my set.jsonl'" in imported.warnings[0] and "load_dataset" not in imported.warnings[0]


def test_a_formatter_primus_lacks_is_one_line_and_pretraining_is_untouched():
    with pytest.raises(PrimusError, match=r"^sft_conversation_format=sharegpt: not a formatter Primus has; known: "):
        mapped(sft_conversation_format="sharegpt")
    assert mapped(stage="pretrain", mock_data=True).canonical == {"module.data.source": "mock"}


@pytest.mark.parametrize("changes, line", [
    ({"sft_dataset_name": "x', split='train'); import os; os.system('id'); ('"},
     "sft_dataset_name=\"x', split='train'); import os; os.system('id'); ('\": not a dataset id of the hub"),
    ({"sft_dataset_split": "train'); import os; ('"}, "sft_dataset_split=\"train'); import os; ('\": not a split name"),
])
def test_text_that_would_reach_the_printed_command_as_code_is_one_line(changes, line):
    with pytest.raises(PrimusError) as raised:
        mapped(**changes)
    assert str(raised.value).startswith(line) and "\n" not in str(raised.value)
    assert mapped(sft_dataset_split="train[:10%]").canonical["module.data.source"] == "sft"
