"""backend=torchtitan: the canonical config as a torchtitan JobConfig (args.py), its rules, and the trainer
(torchtitan's own Trainer in this project's loop: trainer.py)."""
from __future__ import annotations

import logging

from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.torchtitan.args import build_torchtitan_job_config
from primus_hydra.backends.torchtitan.patches import cpu_support_failure
from primus_hydra.errors import PrimusError

TRAINER = "primus_hydra.backends.torchtitan.trainer.TorchTitanTrainer"
SUPPORTED_VERSIONS = ("0.2.*",)
TRAINED_FAMILIES = ("llama",)  # the TOML JobConfig generation (0.3 takes Python config functions)


class TorchTitanAdapter(ExternalBackendAdapter):
    name = "torchtitan"
    import_name = "torchtitan"
    distribution = "torchtitan"
    third_party_dir = "torchtitan"
    install_hint = "Install it with: pip install 'primus-hydra[torchtitan]' (torchtitan 0.2.2 and triton)."
    stages = ("pretrain",)
    library = "torchtitan"
    trainer_classes = {"pretrain": TRAINER}
    reads_native_data = True  # the trainer feeds the project's own batches into torchtitan's Trainer
    reads_indexed_data = True

    @property
    def required_modules(self) -> tuple[str, ...]:
        return ("torchtitan", "triton")  # torchtitan imports triton without declaring it

    def validate(self) -> list[str]:
        failures = super().validate()
        p, model = self.cfg.module.parallel, self.cfg.model
        if model.family not in TRAINED_FAMILIES:
            failures.append(f"model={model.name}: backend=torchtitan trains the {', '.join(TRAINED_FAMILIES)} family "
                            f"(torchtitan's llama3) in this release, not {model.family}; torchtitan 0.2 also ships "
                            f"deepseek_v3, qwen3, llama4 and gpt_oss, not wired here yet (task.dry_run=true exports them)")
        if model.tie_embeddings and model.family == "llama":
            failures.append(f"model.tie_embeddings=true: torchtitan's llama3 has no tied embeddings (model={model.name}); "
                            f"set model.tie_embeddings=false")
        if p.pp > 1:
            failures.append(f"module.parallel.pp={p.pp}: backend=torchtitan runs in this project's loop, which drives "
                            f"torchtitan's train_step without its pipeline schedules yet; use pp=1")
        return failures

    def training_failures(self) -> list[str]:
        failures = super().training_failures()
        if failures:
            return failures
        from primus_hydra.patches.versions import any_version_matches

        version = self.detect_backend_version()
        if not any_version_matches(version, SUPPORTED_VERSIONS):
            return [f"backend=torchtitan: torchtitan {version} is not supported by this release's trainer "
                    f"(supported: {', '.join(SUPPORTED_VERSIONS)}: its TOML JobConfig); install torchtitan==0.2.2"]
        if self.on_cpu:
            failure = cpu_support_failure(version)
            if failure:
                return [failure]
            cp = self.cfg.module.parallel.cp
            if cp > 1:  # found in a worker otherwise: torch has no CPU attention kernel that context parallelism shards
                return [f"module.parallel.cp={cp}: torchtitan's context parallelism shards GPU attention kernels "
                        f"(torch's CPU SDPA has no sharding strategy); set module.parallel.cp=1 on the CPU"]
        return self._job_config_failures()

    def _job_config_failures(self) -> list[str]:
        """The installed torchtitan's own ConfigManager reads the job file, here, before any worker starts."""
        import tempfile
        from pathlib import Path

        from primus_hydra.backends.torchtitan.job_file import parse_job_file, write_job_file

        root = logging.getLogger()  # torchtitan logs to the root logger: its warnings about the run dir's tokenizer
        level = root.level  # (written later, by the trainer) mean nothing here
        root.setLevel(logging.ERROR)
        with tempfile.TemporaryDirectory() as folder:
            try:
                parse_job_file(write_job_file(self.convert_config(), Path(folder) / "job.toml"))
            except PrimusError as error:
                return [str(error)]
            finally:
                root.setLevel(level)
        return []

    def convert_config(self) -> dict:
        return build_torchtitan_job_config(self.cfg, self.run_dir, self.layout)
