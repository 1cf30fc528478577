"""The `logger` group's schema (conf/logger/): where a training run's metrics go besides metrics.jsonl.

`logger.use` lists the sinks: tensorboard (module.log.tensorboard's event files, the default), csv (metrics.csv in
the run dir), wandb, mlflow. Each tracker's keys are its library's own names. Nothing here imports a tracker: the
sinks live in backends/common/tracking.py and run in the worker's rank 0.
"""
from __future__ import annotations

from dataclasses import field
from typing import Dict, List, Optional

from omegaconf import MISSING

from primus_hydra.config.choices import Choice
from primus_hydra.util.records import record


class Sink(Choice):
    tensorboard = "tensorboard"
    csv = "csv"
    wandb = "wandb"
    mlflow = "mlflow"


class WandbMode(Choice):
    online = "online"
    offline = "offline"  # written under logger.wandb.dir; `wandb sync` uploads it later
    disabled = "disabled"


@record
class WandbConfig:
    project: str = "primus-hydra"
    entity: Optional[str] = None  # null: the API key's default entity
    group: Optional[str] = None  # null: the sweep's folder for a sweep point, none for a single run
    name: Optional[str] = None  # null: the run dir's name (a sweep point: <sweep folder>/<point>)
    tags: List[str] = field(default_factory=list)
    mode: WandbMode = WandbMode.online
    dir: Optional[str] = None  # null: the run dir (wandb/ inside it)


@record
class MlflowConfig:
    tracking_uri: Optional[str] = None  # null: $MLFLOW_TRACKING_URI, else a file store in <cwd>/mlruns
    experiment_name: str = "primus-hydra"
    run_name: Optional[str] = None  # null: as logger.wandb.name
    tags: Dict[str, str] = field(default_factory=dict)


@record
class LoggerConfig:
    name: str = MISSING  # the option (conf/logger/<name>.yaml)
    use: List[Sink] = field(default_factory=lambda: [Sink.tensorboard])
    timeout_s: float = 10.0  # a tracker's calls (connect, log, finish) give up after this long: a warning, no hang
    queue_size: int = 10000  # step records waiting for the tracker; when full, a step's record is dropped (counted)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)


# the package each tracker sink needs, and the extra of pyproject.toml that installs it
SINK_EXTRAS = {Sink.wandb.value: ("wandb", "wandb"), Sink.mlflow.value: ("mlflow", "mlflow")}


def missing_tracker_libraries(sinks) -> list[str]:
    """One line per sink in `sinks` whose library is not installed (found without importing it)."""
    import importlib.util

    failures = []
    for sink in sinks:
        package, extra = SINK_EXTRAS.get(str(sink), (None, None))
        if package and importlib.util.find_spec(package) is None:
            failures.append(f"logger.use={str(sink)}: the {package} package is not installed; "
                            f"install it with pip install 'primus-hydra[{extra}]' (or choose another logger=)")
    return failures


def check_logger(cfg, failures: list[str], warnings: list[str]) -> None:
    """Validation rule (config/validate.py): the sinks' libraries are installed, the limits are positive."""
    logger = cfg.get("logger")
    if logger is None:  # a job file written before the group existed
        return
    failures.extend(missing_tracker_libraries(logger.use))
    if logger.timeout_s <= 0:
        failures.append(f"logger.timeout_s={logger.timeout_s}: must be > 0 (seconds)")
    if logger.queue_size < 1:
        failures.append(f"logger.queue_size={logger.queue_size}: must be >= 1")
