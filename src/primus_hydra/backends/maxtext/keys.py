"""backend=maxtext's key table: the canonical keys MaxText takes as they are, under the names of its base.yml
(backends/key_table.py says what drives it). args.py translates them group by group; what MaxText gets derived from
several keys (the per-device batch, the mesh axes, the schedule fractions, dtype) is args.py's own code."""
from __future__ import annotations

from primus_hydra.backends.key_table import Key, KeyTable

MAXTEXT_KEYS = KeyTable([
    Key("module.train_iters", "steps", "training", checked=True),
    Key("module.seq_length", "max_target_length", "training", checked=True),
    Key("module.lr", "learning_rate", "training", kind=float, checked=True),
    Key("module.adam_beta1", "adam_b1", "training", kind=float, checked=True),
    Key("module.adam_beta2", "adam_b2", "training", kind=float, checked=True),
    Key("module.adam_eps", "adam_eps", "training", kind=float),
    Key("module.weight_decay", "adam_weight_decay", "training", kind=float),
    Key("module.clip_grad", "gradient_clipping_threshold", "training", kind=float),
    Key("module.log.interval", "log_period", "logging"),
    Key("backend.remat_policy", "remat_policy", "kernels", checked=True),
    Key("backend.attention", "attention", "kernels", checked=True),
    Key("backend.model_name", "model_name", translated=False, checked=True),  # null: "default" (the preset's sizes)
])
