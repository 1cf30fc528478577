"""task.format=chat|instruction|alpaca|squad (SFT): conversations as token ids and a loss mask of the same length.

A chat record is a JSONL line `{"messages": [{"role": ..., "content": ...}, ...]}` (as Hugging Face's chat datasets
hold them); an instruction record `{"prompt": ..., "response": ...}` is the conversation [user: prompt, assistant:
response]. The mask is 1 on the tokens of the assistant's messages (the response) and 0 elsewhere.

An Alpaca record `{"instruction": ..., "input": ..., "output": ...}` (tatsu-lab/alpaca, Primus's
`sft_conversation_format: alpaca`) is rendered with Alpaca's own prompt, as the `text` field of tatsu-lab/alpaca
holds it (the preamble, `### Instruction:`, `### Input:` when the input is not empty, `### Response:`), whatever
the tokenizer's chat template; the mask is 1 on the output's tokens (and the end of document). A SQuAD record
`{"context", "question", "answers": {"text": [...]}}` (rajpurkar/squad, Primus's `squad`) is the prompt
`Context: C Question: Q Answer:` and the learned ` A` (the first answer), as Megatron-Bridge's SQuAD recipe writes it.

With a tokenizer whose tokenizer_config.json holds a `chat_template`, the conversation is rendered by transformers'
`apply_chat_template`; an assistant turn's tokens are those between the conversation rendered up to it with the
generation prompt and the conversation rendered through it (the template must render a conversation's start as a
prefix of the whole: a record whose turns it does not is a bad record). Without one (byte, sentencepiece, a
tokenizer folder without a template), the plain template: each message is `<|ROLE|>\\n` (mask 0) then
`CONTENT\\n` (mask 1 for the assistant, else 0), each piece tokenized on its own, so that no token straddles a
prompt and a response. With task.append_eod the end-of-document id ends the conversation (unless the template's
last token is already that id), masked in when the last message is the assistant's: the model learns to stop.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import numpy as np

CHAT, INSTRUCTION, ALPACA, SQUAD = "chat", "instruction", "alpaca", "squad"
SFT_FORMATS = (CHAT, INSTRUCTION, ALPACA, SQUAD)
RAW_FORMATS = (ALPACA, SQUAD)  # a prompt of their own, whatever the tokenizer's chat template
RECORD_KEYS = {CHAT: ["messages"], INSTRUCTION: ["prompt", "response"], ALPACA: ["instruction", "output"],
               SQUAD: ["context", "question", "answers"]}
TEXT_KEY, MASK_KEY = "text", "loss_mask"  # the datasets: <out>_text_document, <out>_loss_mask_document
OUTPUT_KEYS = [TEXT_KEY, MASK_KEY]
ASSISTANT = "assistant"


class ConversationError(ValueError):
    """Why a record is not a conversation (a bad record)."""


def chat_template_of(path: Optional[str]) -> Optional[str]:
    """The chat template in a Hugging Face tokenizer folder's tokenizer_config.json, if it holds one."""
    if not path:
        return None
    try:
        config = json.loads((Path(path) / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    return template if isinstance(template, str) and template.strip() else None


def conversation(record: Any, format: str) -> list[dict]:
    """The record as a list of {role, content} messages (ConversationError: why it is not one)."""
    if not isinstance(record, dict):
        raise ConversationError(f"a JSON {type(record).__name__}, not an object")
    if format == SQUAD:
        return _squad(record)
    if format in (INSTRUCTION, ALPACA):
        keys = RECORD_KEYS[format]
        for key in keys + (["input"] if format == ALPACA and "input" in record else []):
            if not isinstance(record.get(key), str):
                raise ConversationError(f"key {key!r} is {'missing' if key not in record else 'not a string'} "
                                        f"(task.format={format} reads {' and '.join(map(repr, keys))} strings"
                                        f"{', and an optional input' if format == ALPACA else ''})")
        prompt, response = (record[key] for key in keys)
        if format == ALPACA:
            prompt = alpaca_prompt(prompt, record.get("input", ""))
        return [{"role": "user", "content": prompt}, {"role": ASSISTANT, "content": response}]
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ConversationError("no 'messages' list (task.format=chat reads {\"messages\": [{\"role\": ..., "
                                "\"content\": ...}, ...]})")
    for number, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise ConversationError(f"messages[{number}] is not a {{\"role\": string, \"content\": string}} object")
    return [{"role": message["role"], "content": message["content"]} for message in messages]


def _squad(record: dict) -> list[dict]:
    for key in ("context", "question"):
        if not isinstance(record.get(key), str):
            raise ConversationError(f"key {key!r} is {'missing' if key not in record else 'not a string'} "
                                    f"(task.format=squad reads 'context' and 'question' strings and 'answers')")
    answers = record.get("answers")
    texts = answers.get("text") if isinstance(answers, dict) else None
    if not isinstance(texts, list) or not texts or not isinstance(texts[0], str):
        raise ConversationError("no answer: task.format=squad reads 'answers' as {\"text\": [\"...\", ...]} (the first "
                                "is learned)")
    context, question, answer = (text.strip(" ") for text in (record["context"], record["question"], texts[0]))
    return [{"role": "user", "content": f"Context: {context} Question: {question} Answer:"},
            {"role": ASSISTANT, "content": f" {answer}"}]


def pieces_ids_and_mask(encode: Any, pieces: list[str], learned: list[bool]) -> tuple[list, list]:
    """The pieces' ids back to back, and a mask of 1 over those of the learned pieces."""
    ids, mask = [], []
    for piece_ids, on in zip(encode(pieces), learned):
        piece_ids = list(np.frombuffer(piece_ids, dtype=np.uint8)) if isinstance(piece_ids, bytes) else piece_ids
        ids += list(piece_ids)
        mask += [int(on)] * len(piece_ids)
    return ids, mask


class PlainTemplate:
    """The documented plain template, over any tokenizer's encode function."""

    def __init__(self, encode: Any):
        self.encode = encode

    def ids_and_mask(self, messages: list[dict]) -> tuple[list, list]:
        pieces, learned = [], []
        for message in messages:
            pieces += [f"<|{message['role']}|>\n", f"{message['content']}\n"]
            learned += [False, message["role"] == ASSISTANT]
        return pieces_ids_and_mask(self.encode, pieces, learned)


_ALPACA_PREAMBLE = {
    False: "Below is an instruction that describes a task. Write a response that appropriately completes the request.",
    True: "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
          "response that appropriately completes the request.",
}


def alpaca_prompt(instruction: str, input: str) -> str:
    """Alpaca's prompt for one record: everything before the output."""
    with_input = bool(input.strip())
    return (f"{_ALPACA_PREAMBLE[with_input]}\n\n### Instruction:\n{instruction}\n\n"
            + (f"### Input:\n{input}\n\n" if with_input else "") + "### Response:\n")


class RawTemplate:
    """The messages' texts back to back, no role markers (Alpaca's prompt is already in the user's message)."""

    def __init__(self, encode: Any):
        self.encode = encode

    def ids_and_mask(self, messages: list[dict]) -> tuple[list, list]:
        return pieces_ids_and_mask(self.encode, [message["content"] for message in messages],
                                   [message["role"] == ASSISTANT for message in messages])


class ChatTemplate:
    """A Hugging Face tokenizer's own chat template, through transformers."""

    def __init__(self, path: str):
        from transformers import PreTrainedTokenizerFast  # the folder has a tokenizer.json (checked before the run)

        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(path)

    def _render(self, messages: list[dict], generation_prompt: bool) -> list:
        rendered = self.tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt)
        if hasattr(rendered, "keys") and "input_ids" in rendered:  # a BatchEncoding in some versions
            rendered = rendered["input_ids"]
        return list(rendered)

    def ids_and_mask(self, messages: list[dict]) -> tuple[list, list]:
        ids = self._render(messages, False)
        mask = [0] * len(ids)
        for turn, message in enumerate(messages):
            if message["role"] != ASSISTANT:
                continue
            start = len(self._render(messages[:turn], True)) if turn else 0
            through = self._render(messages[: turn + 1], False)
            if through != ids[: len(through)] or start > len(through):
                raise ConversationError(f"the chat template does not render the conversation through messages[{turn}] "
                                        f"as the start of the whole, so its response tokens cannot be found")
            mask[start: len(through)] = [1] * (len(through) - start)
        return ids, mask


def conversation_ids(template: Any, messages: list[dict], eod: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, 0/1 loss mask) of one conversation, the end-of-document id appended when `eod` is given."""
    ids, mask = template.ids_and_mask(messages)
    if eod is not None and (not ids or ids[-1] != eod):
        ids.append(eod)
        mask.append(int(messages[-1]["role"] == ASSISTANT))
    return np.asarray(ids, dtype=np.int64), np.asarray(mask, dtype=np.int64)
