"""task=prepare_data: a corpus as Megatron indexed datasets, with a real tokenizer, that every backend trains on.

    python -m primus_hydra task=prepare_data task.input=<file | folder | glob> task.tokenizer=<byte | DIR | x.model>
        task.out=<prefix> [task.format=auto|text|jsonl|parquet] [task.json_keys=[text]] [task.append_eod=true]
        [task.workers=N] [task.token_dtype=auto|uint16|int32] [task.overwrite=false] [task.skip_bad_records=false]

It writes `<prefix>_<key>_document.bin/.idx` per key, as Megatron-LM's tools/preprocess_data.py names and fills
them (megatron-core's own IndexedDatasetBuilder), and `<prefix>_stats.json`; then
`module.data.source=indexed module.data.path=<prefix>_text_document` trains. Everything that can be wrong before
the first document is checked when the job is prepared, one line each (data_prep/checks.py); no run dir is made.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.config.values import without_hydra_node
from primus_hydra.orchestrator.prepare import HANDOFF
from primus_hydra.tasks.data_prep.checks import PrepareDataJob, prepare_data_job
from primus_hydra.tasks.plan import handed_over_at


class PrepareDataTask:
    writes_nothing = True  # but the outputs: no run dir, whatever hydra.run.dir says (tasks/callback.py)

    def __init__(self, cfg: DictConfig, job: Optional[PrepareDataJob] = None):
        self.cfg, self.job = cfg, job

    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None,
                    sweep_points: Optional[int] = None) -> PrepareDataJob:
        return prepare_data_job(without_hydra_node(cfg).task)

    def run(self) -> Optional[dict]:
        """The stats written, or None when the outputs were already up to date."""
        from primus_hydra.tasks.data_prep.write import write_datasets

        job = self.job or HANDOFF.take(handed_over_at()) or self.prepare_job(self.cfg, None)
        if job.up_to_date:
            print(f"prepare_data: {job.names.stats} and its datasets are up to date (same inputs, tokenizer and "
                  f"options); nothing to do", flush=True)
            return None
        return write_datasets(job)
