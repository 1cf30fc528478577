"""A small byte-level BPE tokenizer folder built with the `tokenizers` library itself (no download): the 256 byte
tokens, merges learned from a fixed text and the eos `</s>`, TINY_TOKENIZER_IDS ids in all (a model trained through
it sets model.vocab_size to at least that)."""
from __future__ import annotations

import json
from pathlib import Path

TRAINING_TEXT = """def read_lines(path):
    with open(path) as handle:
        return [line.rstrip() for line in handle]

class Parser:
    '''Parse the configuration file and return the values it holds.'''
    def __init__(self, text):
        self.text = text
        self.values = {}
""" * 4
EOS = "</s>"
TINY_TOKENIZER_IDS = 320


def write_tiny_tokenizer(folder: Path, vocab_size: int = TINY_TOKENIZER_IDS, eos: bool = True) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([TRAINING_TEXT], trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    if eos:
        (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    return folder


def tokenizers_findable() -> bool:
    from primus_hydra.backends.base import module_findable

    return module_findable("tokenizers", [])
