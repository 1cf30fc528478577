"""Primus's SFT data as module.data.source=sft: its Megatron SFT trainer loads a Hugging Face dataset by name
(`sft_dataset_name`, `sft_dataset_split`) or a local JSONL file and formats each record itself
(`sft_conversation_format`); here the records are tokenized once, before the run, by task=prepare_data into the
text and loss-mask datasets source=sft reads. The import points module.data.path at where that command writes them
and says, in the experiment's header, the two commands that make them (this machine reaches no dataset hub).
"""
from __future__ import annotations

import re
import shlex
from pathlib import PurePath
from typing import TYPE_CHECKING

from primus_hydra.errors import PrimusError
from primus_hydra.migrate.primus_yaml import plain

if TYPE_CHECKING:
    from primus_hydra.migrate.mapping import Imported

# Primus's formatter names -> task=prepare_data's task.format
PRIMUS_FORMATS = {"alpaca": "alpaca", "squad": "squad", "bridge_squad": "squad", "messages": "chat",
                  "openai": "chat", "chatml": "chat"}
SFT_KEYS = ("sft_dataset_name", "sft_conversation_format", "sft_dataset_split", "enable_packed_sequences",
            "use_packed_attention")
DATA_DIR = "data/sft"  # module.data.path's folder, relative to where the run starts
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
SPLIT = re.compile(r"[A-Za-z0-9_.+-]+(\[[0-9:%+-]*\])?")


def is_sft_with_dataset(params: dict) -> bool:
    return str(plain(params.get("stage"))) == "sft" and bool(plain(params.get("sft_dataset_name")))


def map_sft_data(params: dict, imported: "Imported") -> None:
    name = str(plain(params["sft_dataset_name"])).strip()
    given = str(plain(params.get("sft_conversation_format")) or "alpaca")
    if given not in PRIMUS_FORMATS:
        raise PrimusError(f"sft_conversation_format={given}: not a formatter Primus has; known: "
                          f"{', '.join(sorted(PRIMUS_FORMATS))}")
    imported.consumed.update(key for key in SFT_KEYS if key in params)
    split = str(plain(params.get("sft_dataset_split")) or "train")
    local = name.startswith(("/", "./", "../", "~")) or name.endswith((".jsonl", ".json"))
    # the hub id and split go into a printed python -c command: only what a hub id and a split spelling hold
    if not local and not HUB_ID.fullmatch(name):
        raise PrimusError(f"sft_dataset_name={name!r}: not a dataset id of the hub (owner/name: letters, digits, "
                          f"'.', '_', '-') nor a local .jsonl/.json file")
    if not local and not SPLIT.fullmatch(split):
        raise PrimusError(f"sft_dataset_split={split!r}: not a split name (letters, digits, '_', '-', '.', and "
                          f"slices such as train[:10%])")
    tokenizer = plain(params.get("tokenizer_model"))
    # one prefix per dataset, split and tokenizer: two experiments that tokenize alike share the files
    stem = PurePath(name).stem if local else f"{name}_{split}"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{stem}.{PurePath(str(tokenizer)).name}" if tokenizer else stem)
    prefix = f"{DATA_DIR}/{slug.strip('_.') or 'dataset'}"
    imported.canonical["module.data.source"] = "sft"
    imported.canonical["module.data.path"] = prefix
    if plain(params.get("enable_packed_sequences")):
        imported.canonical["module.data.packing"] = True
    records = shlex.quote(name) if local else f"{prefix}.jsonl"
    steps = [f"mkdir -p {DATA_DIR}"] + ([] if local else [
        f"python -c \"import datasets; datasets.load_dataset('{name}', split='{split}').to_json('{records}')\""])
    steps.append(f"python -m primus_hydra task=prepare_data task.input={records} task.format={PRIMUS_FORMATS[given]} "
                 f"task.tokenizer={shlex.quote(str(tokenizer or 'TOKENIZER_DIR'))} task.out={prefix}")
    hub_tokenizer = bool(tokenizer) and not str(tokenizer).startswith(("/", "./", "../", "~"))
    tokenizer_note = (f"; task.tokenizer: a local folder holding {tokenizer}'s tokenizer.json" if hub_tokenizer else
                      "; task.tokenizer: a Hugging Face tokenizer folder" if not tokenizer else "")
    imported.warnings.append(
        f"SFT data: Primus loads {name!r}{'' if local else f' ({split})'} and formats it as {given!r} at start-up; "
        f"here it is tokenized once, before the run, into {prefix}_text_document and its loss mask: run "
        + " && ".join(steps) + f" (in the folder the run starts from{tokenizer_note})")
    if given in ("messages", "openai", "chatml"):
        imported.warnings.append(f"sft_conversation_format={given}: rendered by the tokenizer's own chat template "
                                 f"(Primus writes ChatML markers itself); a tokenizer without one gets the plain "
                                 f"template of docs/data.md")
    if plain(params.get("enable_packed_sequences")) and plain(params.get("use_packed_attention")):
        imported.warnings.append("use_packed_attention=true: attention here crosses the packed conversations' "
                                 "boundaries (Primus isolates them with varlen kernels); the loss is still over the "
                                 "responses only")
