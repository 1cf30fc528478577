"""backend=torchtitan: the canonical config as a torchtitan JobConfig (args.py) and its rules."""
from __future__ import annotations

from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.torchtitan.args import build_torchtitan_job_config


class TorchTitanAdapter(ExternalBackendAdapter):
    name = "torchtitan"
    import_name = "torchtitan"
    distribution = "torchtitan"
    third_party_dir = "torchtitan"
    install_hint = (
        "Install torchtitan (pip install torchtitan, next to a CUDA or ROCm build of torch) or point "
        "backend.path=<dir>, $BACKEND_PATH or third_party/torchtitan at a torchtitan checkout."
    )
    stages = ("pretrain",)
    library = "torchtitan"

    def validate(self) -> list[str]:
        failures = super().validate()
        cfg = self.cfg
        if cfg.platform.device == "cpu":
            failures.append("platform.device=cpu: backend=torchtitan trains on GPUs only; use backend=torch for CPU runs")
        if str(cfg.module.data.source) == "tokens":
            failures.append(
                "module.data.source=tokens: torchtitan reads Hugging Face datasets, not flat token files; "
                "use module.data.source=mock or text with module.data.path=<a local copy of a dataset torchtitan knows>"
            )
        return failures

    def convert_config(self) -> dict:
        return build_torchtitan_job_config(self.cfg, self.run_dir, self.layout)
