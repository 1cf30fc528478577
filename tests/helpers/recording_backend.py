"""A small real backend for runtime tests: it records every lifecycle call (no mocks of the runtime itself)."""
from __future__ import annotations

from primus_hydra.backends.base import BackendAdapter, BaseTrainer
from primus_hydra.patches import register_patch

EVENTS: list[str] = []


class RecordingTrainer(BaseTrainer):
    def setup(self):
        EVENTS.append("trainer.setup")

    def init(self):
        EVENTS.append("trainer.init")

    def train(self):
        EVENTS.append("trainer.train")
        if self.backend_args.get("fail_in") == "train":
            raise RuntimeError("training exploded")
        return 1.5

    def cleanup(self, on_error=False):
        EVENTS.append(f"trainer.cleanup(on_error={on_error})")


class RecordingAdapter(BackendAdapter):
    name = "recording"

    def convert_config(self):
        EVENTS.append("adapter.convert_config")
        return {"hidden_size": self.cfg.model.hidden_size, "fail_in": self.cfg.backend.extra_args.get("fail_in")}

    def load_trainer_class(self, stage):
        EVENTS.append(f"adapter.load_trainer_class({stage})")
        return RecordingTrainer


for phase in ("build_args", "setup", "before_train", "after_train"):
    register_patch(f"recording.{phase}", backend="recording", phase=phase)(
        lambda ctx, phase=phase: EVENTS.append(f"patch:{phase}")
    )
