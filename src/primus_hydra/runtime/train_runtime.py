"""PrimusRuntime: the lifecycle of one prepared job in a worker process, top to bottom.

The job was validated, planned and its backend's arguments translated once (orchestrator/prepare.py); the runtime
trusts it and checks only that it runs in the world it was prepared for. rank logging -> env block -> adapter
(backend._target_) -> patches loaded -> backend path -> prepare_backend -> arguments (the prepared translation;
convert_config and patches(build_args) here only when it was made for another library release or config:
backends/translation.py) -> [dry run stops here] -> trainer (by _target_) -> patches(setup) -> setup -> init ->
patches(before_train) -> train -> patches(after_train) -> cleanup. Any error: cleanup(on_error=True), logged to
the run dir, re-raised.
"""
from __future__ import annotations

import gc
import logging
import os
from pathlib import Path
from typing import Any, Optional

from primus_hydra.backends.base import BackendAdapter, BaseTrainer, load_adapter
from primus_hydra.backends.translation import Translation, translate, why_translate_again
from primus_hydra.config.secrets import REDACTED, config_for_file, is_secret_name, redact_text, secret_values
from primus_hydra.config.values import to_plain
from primus_hydra.distributed_env import DistributedEnv, detect_distributed_env
from primus_hydra.errors import PrimusError
from primus_hydra.orchestrator.prepare import PreparedJob
from primus_hydra.patches.registry import PatchContext, resolve_enabled_ids
from primus_hydra.patches.runner import load_patch_modules, raise_load_errors, run_patches
from primus_hydra.runtime.logging_setup import FILE_ONLY, setup_rank_logging, teardown_rank_logging
from primus_hydra.util.collector import collector_paused
from primus_hydra.util.private_files import write_private_text
from primus_hydra.util.yaml_text import dump_yaml

log = logging.getLogger(__name__)

DRY_RUN_FILE = "backend_args.yaml"
RESOLVED_CONFIG_FILE = "config_resolved.yaml"


def apply_env_block(env: dict[str, str]) -> dict[str, str]:
    """setdefault semantics: a variable already in the environment (the user's) wins. Returns what was set."""
    applied = {}
    for key, value in env.items():
        if key not in os.environ:
            os.environ[key] = str(value)
            applied[key] = str(value)
    return applied


class PrimusRuntime:
    def __init__(self, job: PreparedJob, run_dir: Path, dist: Optional[DistributedEnv] = None):
        self.job = job
        self.cfg = job.cfg
        self.run_dir = Path(run_dir)
        self.dist = dist or detect_distributed_env()
        self.phases: list[str] = []  # what ran, in order (logged, and read by tests)
        self.adapter: Optional[BackendAdapter] = None
        self.trainer: Optional[BaseTrainer] = None
        self.backend_args: Any = None
        self.secrets: set[str] = set()  # values blanked out of every log line and written file

    def run(self) -> Any:
        self._check_world()
        self.secrets = secret_values(self.cfg)
        log_handler = setup_rank_logging(self.dist, self.run_dir, self.secrets)
        try:
            return self._run_phases()
        except BaseException as error:
            # a user error is its own one-line explanation; anything else gets its traceback in the logs
            with_traceback = not isinstance(error, (PrimusError, KeyboardInterrupt))
            # user errors reach the console as the CLI's one `error:` line; the run dir's logs get them here
            log.error("run failed: %s: %s", type(error).__name__, error, exc_info=with_traceback,
                      extra=FILE_ONLY if not with_traceback else None)
            self._safe_cleanup()
            raise
        finally:
            teardown_rank_logging(log_handler)
            gc.unfreeze()  # what set-up made is collectable again (the API runs jobs in the caller's process)

    def _check_world(self) -> None:
        """The one check a worker makes: it runs in the world its job was prepared for."""
        prepared = self.job.layout.world_size
        if self.dist.is_distributed and self.dist.world_size != prepared:
            raise PrimusError(
                f"this job was prepared for world size {prepared}, but runs as rank {self.dist.rank} of "
                f"{self.dist.world_size}; start {prepared} processes (launch.nnodes x launch.nproc_per_node)"
            )
        if not self.dist.is_distributed and prepared > 1 and not self.cfg.task.dry_run:
            raise PrimusError(
                f"world size {prepared} needs {prepared} processes, but this one was not started as a rank of a job; "
                f"run it through `python -m primus_hydra` (which launches them) or torchrun/srun"
            )

    def _mark(self, phase: str) -> None:
        self.phases.append(phase)
        log.debug("runtime phase: %s", phase)

    def _run_phases(self) -> Any:
        # Set-up imports the backend's libraries and builds the model: ~3 x 10^5 objects that live as long as the run,
        # and almost no garbage. Python's collector would scan them all ~5 times on the way (~0.35 s a process here);
        # it is paused instead, and what set-up made is frozen (never scanned) until the run ends or its process group
        # is destroyed (backends/common/distributed.py). The teardown draws the loss curve (matplotlib's import: one
        # more full pass, ~0.2 s) with it paused too.
        with collector_paused(freeze_what_was_made=True):
            ctx, enabled_ids = self._set_up()
        if self.trainer is None:
            return self._write_dry_run()
        trainer = self.trainer
        self._mark("train")
        result = trainer.train()
        self._patch_phase(ctx, "after_train", enabled_ids)
        self._mark("cleanup")
        self.trainer = None  # cleaned up normally: no second cleanup on a later error
        with collector_paused(freeze_what_was_made=False):
            trainer.cleanup(on_error=False)
        return result

    def _set_up(self) -> tuple[PatchContext, Optional[set[str]]]:
        """Every phase before train(); self.trainer stays None for a dry run."""
        cfg = self.cfg
        self._mark("env")
        if self.dist.is_main:  # what the rest resolved to; values from the environment stay ${oc.env:...}
            text = dump_yaml(config_for_file(cfg), sort_keys=False, default_flow_style=False)
            write_private_text(self.run_dir / RESOLVED_CONFIG_FILE, text)
        applied = apply_env_block(dict(cfg.platform.env))
        log.info(
            "job: launcher=%s rank=%d world_size=%d run_dir=%s", self.dist.launcher, self.dist.rank,
            self.dist.world_size, self.run_dir,
        )
        self._mark("adapter")
        self.adapter = adapter = load_adapter(cfg, self.job.layout, self.run_dir)
        applied.update(apply_env_block(adapter.env_defaults()))
        if applied:
            shown = {key: REDACTED if is_secret_name(key) else value for key, value in applied.items()}
            log.info("env set: %s", ", ".join(f"{key}={value}" for key, value in sorted(shown.items())))
        load_patch_modules(cfg)  # normally imported already, by the Hydra callback or when the job was prepared
        raise_load_errors()
        enabled_ids = resolve_enabled_ids(str(cfg.patches.enabled))

        self._mark("backend_path")
        path = adapter.setup_backend_path()
        if path:
            log.info("backend %s: using source tree %s", adapter.name, path)
        dry_run = bool(cfg.task.dry_run)
        if not dry_run:  # a dry run only translates arguments: the library need not be installed
            self._mark("prepare_backend")
            adapter.prepare_backend()
        self._mark("arguments")
        version = adapter.detect_backend_version()
        self.backend_args = adapter.typed_arguments(self._translation(adapter, version).arguments)
        ctx = PatchContext(
            backend=adapter.name, phase="setup", backend_version=version, cfg=cfg,
            run_dir=self.run_dir, backend_args=self.backend_args,
        )
        if dry_run:
            return ctx, enabled_ids

        self._mark("trainer")
        trainer_class = adapter.trainer_class(str(cfg.module.stage))
        self.trainer = trainer = trainer_class(self.backend_args, cfg, self.job.layout, self.run_dir, self.dist)
        ctx.trainer = trainer
        self._patch_phase(ctx, "setup", enabled_ids)
        self._mark("setup")
        trainer.setup()
        self._mark("init")
        trainer.init()
        self._patch_phase(ctx, "before_train", enabled_ids)
        return ctx, enabled_ids

    def _translation(self, adapter: BackendAdapter, version: Optional[str]) -> Translation:
        """The arguments the job was prepared with; translated here only when they were made for another release of
        the backend's library or another config (backends/translation.py)."""
        prepared = self.job.translation
        resolved_here = self.job.auto_knobs if self.job.plan is not None else frozenset()
        reason = why_translate_again(prepared, adapter, version, resolved_here)
        if reason is None:
            for patch_id in prepared.patches:
                log.info("patch applied: %s [build_args] (when the job was prepared)", patch_id)
            return prepared
        log.info("backend arguments translated in this process: %s", reason)
        self._mark("translate")
        return translate(adapter, self.run_dir)

    def _patch_phase(self, ctx: PatchContext, phase: str, enabled_ids: Optional[set[str]]) -> None:
        ctx.phase = phase
        self._mark(f"patches:{phase}")
        run_patches(ctx, enabled_ids)

    def _write_dry_run(self) -> Path:
        self._mark("dry_run")
        target = self.run_dir / DRY_RUN_FILE
        if self.dist.is_main:
            target.parent.mkdir(parents=True, exist_ok=True)
            text = dump_yaml(to_plain(self.backend_args), sort_keys=False, default_flow_style=False)
            header = f"# backend={self.adapter.name}: final arguments after build_args patches\n"
            write_private_text(target, redact_text(header + text, self.secrets))
            log.info("dry run: backend arguments written to %s", target)
            print(f"dry run: {self.adapter.name} arguments written to {target}")
            for name, text in self.adapter.dry_run_files(self.backend_args).items():
                write_private_text(self.run_dir / name, redact_text(text, self.secrets))
                print(f"dry run: {self.adapter.name}'s own job file written to {self.run_dir / name}")
        return target

    def _safe_cleanup(self) -> None:
        if self.trainer is None:
            return
        try:
            self.trainer.cleanup(on_error=True)
        except Exception:  # noqa: BLE001 - the original error matters more
            log.exception("cleanup(on_error=True) failed as well")
        self.trainer = None
