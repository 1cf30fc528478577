"""task.tokenizer: `byte`, a Hugging Face tokenizer folder (tokenizer.json) or a sentencepiece `.model`.

A TokenizerSpec says what the checks need (vocabulary size, end-of-document id, a digest of the files) and is what
each worker loads. Text becomes ids as Megatron-LM's tools/preprocess_data.py makes them: no special tokens added
(no BOS), the end-of-document id being the tokenizer's eos. `byte`: byte b is id b, and the end of a document 256.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from primus_hydra.backends.common.text_tokenizer import TOKENIZER_FILE, TOKENIZER_FILES, eos_token

BYTE = "byte"
BYTE_EOD = 256
Encode = Callable[[list], list]  # texts (str, or bytes for byte) -> a list of ids per text


class TokenizerError(ValueError):
    """One line naming task.tokenizer."""


@dataclass(frozen=True)
class TokenizerSpec:
    kind: str  # byte, hf, sentencepiece
    path: Optional[str]
    vocab_size: int  # ids below this
    eod_id: Optional[int]
    digest: str  # of the files that decide the ids

    def describe(self) -> dict:
        return {"kind": self.kind, "path": self.path, "vocab_size": self.vocab_size, "eod_id": self.eod_id,
                "digest": self.digest}

    def load(self) -> Encode:
        """A function from a list of texts to their ids, in this process (TOKENIZERS_PARALLELISM decides whether the
        `tokenizers` library uses more threads)."""
        if self.kind == BYTE:
            return lambda texts: [text if isinstance(text, bytes) else text.encode("utf-8") for text in texts]
        if self.kind == "hf":
            tokenizer = _hf_tokenizer(Path(self.path) / TOKENIZER_FILE)
            encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
            return lambda texts: [encoding.ids for encoding in encode(texts, add_special_tokens=False)]
        model = _sentencepiece_model(Path(self.path))
        return lambda texts: model.encode(texts, out_type=int, num_threads=1)


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


def _hf_tokenizer(file: Path) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerError(f"task.tokenizer={file.parent}: reading it needs the `tokenizers` library (pip install "
                             f"'primus-hydra[data]')") from None
    try:
        return Tokenizer.from_file(str(file))
    except Exception as error:  # noqa: BLE001 - the library's own reason, as one line
        raise TokenizerError(f"task.tokenizer={file.parent}: {file.name} is not a tokenizer the `tokenizers` "
                             f"library reads ({str(error).splitlines()[0] if str(error) else type(error).__name__})") \
            from None


def _sentencepiece_model(file: Path) -> Any:
    try:
        import sentencepiece
    except ImportError:
        raise TokenizerError(f"task.tokenizer={file}: reading a .model needs the sentencepiece library (pip install "
                             f"'primus-hydra[data]')") from None
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(file))
    except Exception as error:  # noqa: BLE001 - the library's own reason, as one line
        raise TokenizerError(f"task.tokenizer={file}: not a sentencepiece model ({error})") from None


def _hf_spec(folder: Path, typed: str) -> TokenizerSpec:
    file = folder / TOKENIZER_FILE
    if not file.is_file():
        raise TokenizerError(f"task.tokenizer={typed}: the folder holds no {TOKENIZER_FILE} (give a Hugging Face "
                             f"fast tokenizer's folder, a sentencepiece .model, or byte)")
    tokenizer = _hf_tokenizer(file)
    eos = eos_token(folder)
    eod_id = tokenizer.token_to_id(eos) if eos is not None else None
    files = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    return TokenizerSpec("hf", str(folder), tokenizer.get_vocab_size(with_added_tokens=True), eod_id, _digest(files))


def tokenizer_spec(typed: Any) -> TokenizerSpec:
    """What task.tokenizer names, checked (TokenizerError: one line)."""
    if typed is None or not str(typed).strip():
        raise TokenizerError("task.tokenizer is not set: give byte, a Hugging Face tokenizer folder (tokenizer.json) "
                             "or a sentencepiece .model file")
    if str(typed) == BYTE:
        return TokenizerSpec(BYTE, None, BYTE_EOD + 1, BYTE_EOD, BYTE)
    path = Path(str(typed)).expanduser().absolute()
    if path.is_dir():
        return _hf_spec(path, str(typed))
    if path.is_file() and path.suffix == ".model":
        model = _sentencepiece_model(path)
        eos = model.eos_id()
        return TokenizerSpec("sentencepiece", str(path), model.get_piece_size(), eos if eos >= 0 else None,
                             _digest([path]))
    if path.is_file():
        raise TokenizerError(f"task.tokenizer={typed}: a file that is not a sentencepiece .model (give byte, a "
                             f"Hugging Face tokenizer folder or a .model file)")
    raise TokenizerError(f"task.tokenizer={typed}: no such file or folder (give byte, a Hugging Face tokenizer "
                         f"folder or a sentencepiece .model file)")
