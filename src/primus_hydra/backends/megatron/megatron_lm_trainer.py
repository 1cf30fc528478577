"""backend.trainer=megatron_lm: Megatron-LM's `pretrain()` with the GPT providers of the checkout's pretrain_gpt.py
(datasets, model, forward step), the way `torchrun pretrain_gpt.py <flags>` runs it: the checkout is on sys.path
(the runtime put it there), the translated arguments become the flags Megatron-LM's own parser reads, and
Megatron-LM owns the loop, its logs, TensorBoard and checkpoints (`save`, `load`). GPUs only."""
from __future__ import annotations

import logging
import sys
from functools import partial
from typing import Optional

from primus_hydra.backends.base import BaseTrainer
from primus_hydra.backends.megatron.datasets import text_as_indexed_dataset
from primus_hydra.backends.megatron.megatron_lm import command_line, megatron_lm_parser, parse_with_megatron

log = logging.getLogger("primus_hydra.megatron")


class MegatronLMTrainer(BaseTrainer):
    backend_args: dict

    def setup(self) -> None:
        parser = megatron_lm_parser(None)  # the runtime put the checkout first on sys.path
        self.argv = command_line(self.backend_args, parser)
        parse_with_megatron(self.argv, parser)  # a flag the checkout cannot read stops here, in one line
        log.info("Megatron-LM pretrain_gpt.py %s", " ".join(self.argv))
        data = self.cfg.module.data
        if str(data.source) == "text":  # the indexed dataset the text_as_indexed patch pointed data_path at
            text_as_indexed_dataset(self.run_dir, data.path, self.dist.rank, self.cfg.launch.timeout_s,
                                    tokenizer=data.get("tokenizer"))

    def init(self) -> None:
        """Megatron-LM builds its model, optimizer and data inside pretrain()."""

    def train(self) -> Optional[float]:
        import pretrain_gpt
        from megatron.core.enums import ModelType
        from megatron.training import pretrain

        sys.argv = ["pretrain_gpt.py", *self.argv]
        pretrain_gpt.train_valid_test_datasets_provider.is_distributed = True
        extra = {"get_embedding_ranks": pretrain_gpt.get_embedding_ranks} if hasattr(pretrain_gpt, "get_embedding_ranks") else {}
        model_provider = pretrain_gpt.model_provider
        if hasattr(pretrain_gpt, "gpt_builder"):  # core_v0.15+: the provider takes the builder
            model_provider = partial(model_provider, pretrain_gpt.gpt_builder)
        pretrain(pretrain_gpt.train_valid_test_datasets_provider, model_provider, ModelType.encoder_or_decoder,
                 pretrain_gpt.forward_step, args_defaults={"tokenizer_type": "GPT2BPETokenizer"}, **extra)
        return None

    def cleanup(self, on_error: bool = False) -> None:
        """Megatron-LM tears down its own process groups."""
