"""A byte-level tokenizer, made by the project with the `tokenizers` library (no download): id b is byte b, the very
tokens backend=torch reads from text. Written as tokenizer.json into the run dir, where torchtitan's own
HuggingFaceTokenizer loads it (model.hf_assets_path) when the user names no tokenizer."""
from __future__ import annotations

from pathlib import Path

TOKENIZER_DIR = Path(".primus") / "tokenizer"  # under the run dir


def _byte_characters() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: the alphabet of the tokenizers library's ByteLevel pre-tokenizer."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}


def write_byte_tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    characters = _byte_characters()
    tokenizer = Tokenizer(models.BPE(vocab={characters[b]: b for b in range(256)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder
