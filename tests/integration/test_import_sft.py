"""A Primus SFT experiment (its trainer loads a dataset by name) imported as module.data.source=sft: the import
prints the commands that tokenize the records; run as printed, they make the data the imported experiment trains on
with megatron-core, packed as Primus packs; without them the run is one line naming the missing file."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers.cli import clean_env, primus, run_dirs
from helpers.primus_tree import META, write_primus_tree
from helpers.tiny_tokenizer import tokenizers_findable, write_tiny_tokenizer

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not tokenizers_findable(), reason="tokenizers is not installed")]

SFT_TRAINER = """\
    extends:
      - trainer_base.yaml
    stage: sft
    train_iters: 1000
    seq_length: 2048
    finetune: true
    eval_iters: 0
    eval_interval: 1000
    split: null
    sft_dataset_name: "tatsu-lab/alpaca"
    sft_conversation_format: "alpaca"
    sft_dataset_split: "train"
    enable_packed_sequences: false
    use_packed_attention: false
    """
TINY = ("model=llama_tiny", "launch.nproc_per_node=1", "module.global_batch_size=2", "module.micro_batch_size=1",
        "module.precision=fp32")


def test_the_printed_commands_make_the_data_the_imported_sft_experiment_trains_on(tmp_path):
    tokenizer = write_tiny_tokenizer(tmp_path / "tok")
    records = tmp_path / "alpaca.jsonl"
    records.write_text("".join(json.dumps({"instruction": f"add {i} and {i}", "input": "", "output": str(2 * i)}) + "\n"
                               for i in range(64)))
    tree = write_primus_tree(tmp_path / "primus", {
        "primus/configs/modules/megatron/sft_trainer.yaml": SFT_TRAINER,
        "examples/megatron/sft.yaml": META + f"""\
            modules:
              post_trainer:
                framework: megatron
                config: sft_trainer.yaml
                model: llama3_8B.yaml
                overrides:
                  tokenizer_model: {tokenizer}
                  sft_dataset_name: {records}
                  enable_packed_sequences: true
                  train_iters: 3
                  seq_length: 128
            """})
    work = tmp_path / "work"
    result = primus("task=import", f"task.source={tree / 'examples/megatron/sft.yaml'}", f"task.primus_root={tree}",
                    f"task.out={tmp_path / 'conf'}", cwd=work, timeout=120)
    assert result.returncode == 0, result.stderr
    body = yaml.safe_load((tmp_path / "conf" / "experiment" / "sft.yaml").read_text())
    assert body["module"]["data"] == {"source": "sft", "path": "data/sft/alpaca.tok", "packing": True}
    assert not {"sft_dataset_name", "enable_packed_sequences"} & set(body["backend"].get("extra_args", {}))

    run = ("--config-dir", str(tmp_path / "conf"), "experiment=sft", *TINY, "model.vocab_size=320")
    missing = primus(*run, cwd=work, timeout=120)
    assert missing.returncode == 2 and "no data/sft/alpaca.tok_text_document.bin" in missing.stderr
    assert not run_dirs(work / "outputs")

    commands = re.search(r"SFT data: .*?: run (.*) \(in the folder the run starts from\)", result.stderr).group(1)
    # as in the user's shell, with this interpreter's environment active: `python` is the one running the tests
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    made = subprocess.run(["bash", "-c", commands], cwd=work, capture_output=True, text=True, timeout=120,
                          env=clean_env({"PATH": path}))
    assert made.returncode == 0, made.stderr
    trained = primus(*run, cwd=work, timeout=240)
    assert trained.returncode == 0, trained.stderr[-3000:]
    [run_dir] = run_dirs(work / "outputs")
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [record["loss"] for record in steps if "loss" in record]
    assert len(losses) == 3 and all(0 < loss < 10 for loss in losses)
    assert "attention crosses" in trained.stderr  # packing's warning: the conversations share a sequence
