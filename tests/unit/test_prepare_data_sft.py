"""task.format=chat and task.format=instruction: a tiny chat set, tokenized by a BPE tokenizer built here, becomes
<out>_text_document and <out>_loss_mask_document of the same document lengths, the mask 1 exactly on the assistant's
tokens (with the tokenizer's own chat template, through transformers, and with the documented plain template);
a record that is no conversation, and options that do not fit, are one line each, with nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers.compose import compose_primus
from helpers.tiny_tokenizer import EOS, tokenizers_findable, write_tiny_tokenizer
from primus_hydra.errors import ConfigValidationError, DataError

pytestmark = pytest.mark.skipif(not tokenizers_findable(), reason="tokenizers is not installed")

CHAT = [
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "read the lines"},
                  {"role": "assistant", "content": "return [line.rstrip()]"},
                  {"role": "user", "content": "and the parser?"}, {"role": "assistant", "content": "class Parser:"}]},
    {"messages": [{"role": "user", "content": "values?"}, {"role": "assistant", "content": "self.values = {}"}]},
]
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}" + EOS + "{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def write_chat_tokenizer(folder: Path) -> Path:
    """The tiny tokenizer with a chat template in its tokenizer_config.json, as a chat model's folder holds one."""
    write_tiny_tokenizer(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": EOS, "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATE}))
    return folder


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((record if isinstance(record, str) else json.dumps(record)) + "\n" for record in records))
    return path


def prepare(*overrides: str):
    from primus_hydra.tasks import run_task

    return run_task(compose_primus("task=prepare_data", "task.workers=1", *overrides))


def read_dataset(out: Path) -> tuple[list, list]:
    """(ids, mask) per document, read with megatron-core's own IndexedDataset."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    text, mask = IndexedDataset(f"{out}_text_document"), IndexedDataset(f"{out}_loss_mask_document")
    assert len(text) == len(mask) and mask.index.dtype == np.uint8
    assert list(text.document_indices) == list(mask.document_indices)
    return [np.array(text[i]) for i in range(len(text))], [np.array(mask[i]) for i in range(len(mask))]


def decode(folder: Path, ids) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).decode([int(i) for i in ids], skip_special_tokens=False)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sft")
    return {"root": root, "plain": write_tiny_tokenizer(root / "plain"), "chat": write_chat_tokenizer(root / "chat"),
            "input": write_jsonl(root / "chat.jsonl", CHAT)}


def test_the_chat_template_renders_and_the_mask_is_exactly_the_assistants_tokens(folders):
    pytest.importorskip("transformers")
    out = folders["root"] / "template" / "c"
    prepare(f"task.input={folders['input']}", f"task.tokenizer={folders['chat']}", f"task.out={out}", "task.format=chat")
    ids, masks = read_dataset(out)
    assert decode(folders["chat"], ids[0]) == ("<system>be brief</s><user>read the lines</s><assistant>return "
                                               "[line.rstrip()]</s><user>and the parser?</s><assistant>class Parser:</s>")
    assert decode(folders["chat"], ids[0][masks[0] == 1]) == "return [line.rstrip()]</s>class Parser:</s>"
    assert decode(folders["chat"], ids[1][masks[1] == 1]) == "self.values = {}</s>"
    assert set(np.unique(masks[0])) == {0, 1}


def test_without_a_template_the_plain_one_masks_in_the_responses_and_the_eod(folders):
    out = folders["root"] / "plain_out" / "c"
    stats = prepare(f"task.input={folders['input']}", f"task.tokenizer={folders['plain']}", f"task.out={out}",
                    "task.format=chat")
    ids, masks = read_dataset(out)
    assert decode(folders["plain"], ids[1]) == "<|user|>\nvalues?\n<|assistant|>\nself.values = {}\n</s>"
    assert decode(folders["plain"], ids[1][masks[1] == 1]) == "self.values = {}\n</s>"
    assert decode(folders["plain"], ids[0][masks[0] == 1]) == "return [line.rstrip()]\nclass Parser:\n</s>"
    assert stats["tokens"] == sum(len(document) for document in ids)  # the mask is not counted as tokens


def test_instruction_records_are_a_user_prompt_and_an_assistant_response(folders):
    source = write_jsonl(folders["root"] / "instruction.jsonl", [{"prompt": "read the lines", "response": "return"}])
    out = folders["root"] / "instruction" / "c"
    prepare(f"task.input={source}", "task.tokenizer=byte", f"task.out={out}", "task.format=instruction")
    ids, masks = read_dataset(out)
    assert bytes(ids[0][:-1].astype(np.uint8)) == b"<|user|>\nread the lines\n<|assistant|>\nreturn\n"
    assert bytes(ids[0][masks[0] == 1][:-1].astype(np.uint8)) == b"return\n" and ids[0][-1] == 256



def test_alpaca_records_take_alpacas_prompt_and_only_the_output_is_learned(folders):
    source = write_jsonl(folders["root"] / "alpaca.jsonl", [
        {"instruction": "sum", "input": "1 2", "output": "3"}, {"instruction": "say hi", "input": "", "output": "hi"}])
    out = folders["root"] / "alpaca" / "c"
    prepare(f"task.input={source}", "task.tokenizer=byte", f"task.out={out}", "task.format=alpaca")
    ids, masks = read_dataset(out)
    assert bytes(ids[0][:-1].astype(np.uint8)).decode() == (
        "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
        "response that appropriately completes the request.\n\n### Instruction:\nsum\n\n### Input:\n1 2\n\n"
        "### Response:\n3")
    assert bytes(ids[1][:-1].astype(np.uint8)).decode() == (
        "Below is an instruction that describes a task. Write a response that appropriately completes the request."
        "\n\n### Instruction:\nsay hi\n\n### Response:\nhi")
    assert bytes(ids[0][masks[0] == 1].astype(np.uint8)) == b"3\x00" and ids[0][-1] == 256 and masks[0][-1] == 1



def test_squad_records_are_bridges_prompt_and_the_first_answer(folders):
    source = write_jsonl(folders["root"] / "squad.jsonl", [
        {"context": " Paris is in France. ", "question": "Where is Paris?", "answers": {"text": ["France", "FR"]}}])
    out = folders["root"] / "squad" / "c"
    prepare(f"task.input={source}", "task.tokenizer=byte", f"task.out={out}", "task.format=squad")
    ids, masks = read_dataset(out)
    assert bytes(ids[0][:-1].astype(np.uint8)) == b"Context: Paris is in France. Question: Where is Paris? Answer: France"
    assert bytes(ids[0][masks[0] == 1][:-1].astype(np.uint8)) == b" France"

@pytest.mark.parametrize("record, reason", [
    ({"messages": "hi"}, "no 'messages' list"),
    ({"messages": [{"role": "user"}]}, "messages[0] is not a"),
    ({"instruction": "sum", "input": 1, "output": "3"}, "key 'input' is not a string"),
    ({"instruction": "sum"}, "key 'output' is missing"),
    ({"context": "c", "question": "q", "answers": {"text": []}}, "no answer"),
])
def test_a_record_that_is_no_conversation_is_named_by_its_line_and_nothing_is_written(folders, record, reason):
    format = "chat" if "messages" in record else "squad" if "context" in record else "alpaca"
    good = {"chat": CHAT[1], "alpaca": {"instruction": "a", "output": "b"},
            "squad": {"context": "c", "question": "q", "answers": {"text": ["a"]}}}[format]
    case = folders["root"] / "bad" / reason.split()[-1].strip("'")
    case.mkdir(parents=True)
    source = write_jsonl(case / "in.jsonl", [good, record])
    out = case / "out" / "c"
    out.parent.mkdir()
    with pytest.raises(DataError) as raised:
        prepare(f"task.input={source}", "task.tokenizer=byte", f"task.out={out}", f"task.format={format}")
    assert str(raised.value).startswith(f"{source}:2: {reason}") and "\n" not in str(raised.value)
    assert not list(out.parent.iterdir())


def test_options_that_do_not_fit_a_chat_set_are_one_line_each(folders):
    from primus_hydra.tasks.prepare_data import PrepareDataTask

    out = folders["root"] / "refused" / "c"
    with pytest.raises(ConfigValidationError) as raised:
        PrepareDataTask.prepare_job(compose_primus(
            "task=prepare_data", f"task.input={folders['input']}", "task.tokenizer=byte", f"task.out={out}",
            "task.format=chat", "task.json_keys=[body]"), None)
    assert raised.value.failures == [
        "task.json_keys=['body']: task.format=chat reads messages and writes the text and loss_mask datasets; leave "
        "task.json_keys unset"]
    with pytest.raises(ConfigValidationError) as raised:
        PrepareDataTask.prepare_job(compose_primus(
            "task=prepare_data", f"task.input={write_jsonl(folders['root'] / 'plain.jsonl', [{'text': 'x'}])}",
            "task.tokenizer=byte",
            f"task.out={out}", "task.format=instruction"), None)
    assert raised.value.failures[0].startswith("task.json_keys=['prompt', 'response']: ")
    assert "has no key 'prompt'" in raised.value.failures[0]


def test_conversations_longer_than_a_sequence_are_one_warning_naming_those_that_teach_nothing(folders):
    from primus_hydra.backends.common.data_sources import sft_truncation_warning

    source = write_jsonl(folders["root"] / "long.jsonl", [
        {"prompt": "p" * 10, "response": "r" * 10}, {"prompt": "p" * 200, "response": "r"},
        {"prompt": "p", "response": "r"}])
    out = folders["root"] / "long" / "c"
    prepare(f"task.input={source}", "task.tokenizer=byte", f"task.out={out}", "task.format=instruction")
    longest = len(b"<|user|>\n" + b"p" * 200 + b"\n<|assistant|>\nr\n") + 1  # the end of document
    assert sft_truncation_warning(str(out), 40) == (
        f"module.data.path={out}: 2 of 3 conversations are longer than a sequence (module.seq_length=40; the longest "
        f"has {longest} tokens) and are cut there, 1 of them before any learned token (they teach nothing); raise "
        "module.seq_length to keep them whole")
    assert sft_truncation_warning(str(out), longest - 1) is None
