"""task=projection: will this config fit, how fast will it run, and which layout is best (projection/).

JSON on stdout (one document; one line per point under -m), a readable report on stderr, nothing written, no
torch import. task.search=true ranks the layouts of the world size; task.calibrate=true runs a few real steps of
the job on this machine and prints the measurement next to the projection.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from primus_hydra.backends.base import adapter_class
from primus_hydra.config.choices import auto_int
from primus_hydra.config.layout import unchecked_parallel_layout
from primus_hydra.config.schema_hardware import PEAK_RANGE, hardware_number_failures, out_of_range
from primus_hydra.config.values import without_hydra_node
from primus_hydra.errors import ConfigValidationError, PrimusError
from primus_hydra.orchestrator.gpu_probe import detect_gpus
from primus_hydra.orchestrator.hardware_entry import configured_hardware_entry
from primus_hydra.orchestrator.plan import build_resource_plan
from primus_hydra.orchestrator.prepare import HANDOFF, PreparedJob, prepare, show_warnings
from primus_hydra.projection.hardware import resolve_hardware
from primus_hydra.projection.layout import LARGE_WORLD, MAX_WORLD, projection_layout
from primus_hydra.projection.project import project
from primus_hydra.projection.report import describe, search_table
from primus_hydra.tasks.plan import _sweep_point, handed_over_at


class ProjectionTask:
    runs_sweep_points_in_process = True  # see task=plan
    writes_nothing = True  # a query: no run dir, whatever hydra.run.dir says (tasks/callback.py); calibration
    # runs in a temporary run dir of its own

    def __init__(self, cfg: DictConfig, job=None, point: Optional[dict] = None):
        self.cfg, self.job, self.point = cfg, job, point

    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None, sweep_points: Optional[int] = None,
                    handed_over: bool = False):
        """The real run's validation for the cluster the projection is for: its world size, its device kind.
        handed_over: `cfg` was composed for this job alone (tasks/query.py): prepared in place, not copied (but for
        a search, which prepares it again when the configured layout is refused)."""
        world = projected_world_size(cfg)
        failures = projection_input_failures(cfg, world)
        if failures:
            raise ConfigValidationError(failures)
        gpu = _targets_gpu(cfg)
        scale = [large_world_warning(cfg, world)] if world > LARGE_WORLD else []
        try:
            job = prepare(cfg, world_size=world, on_this_machine=False, trains=False, runs_on_gpu=gpu,
                          handed_over=handed_over and not cfg.task.search)
            return dataclasses.replace(job, warnings=job.warnings + scale)
        except ConfigValidationError as error:
            if not cfg.task.search:
                raise
            refused = error.failures
        # the search replaces the layout: the rest of the config must pass, the configured layout need not
        neutral = without_hydra_node(cfg)
        for key, value in LAYOUT_NEUTRAL.items():
            if OmegaConf.select(neutral, key, default="<absent>") != "<absent>":
                OmegaConf.update(neutral, key, value if key != "module.global_batch_size" else world, merge=False)
        job = prepare(neutral, world_size=world, on_this_machine=False, trains=False, runs_on_gpu=gpu)
        note = f"the configured layout is refused ({refused[0]}); task.search looks for one that a run accepts"
        return PreparedJob(without_hydra_node(cfg), None, None, job.warnings + scale + [note])

    def run(self) -> dict:
        point = self.point or _sweep_point()
        try:
            data = self._project()
        except PrimusError as error:
            if point is not None:  # a sweep point's result: its line on stdout too, then the sweep's failed point
                print(json.dumps({"point": point, "error": " ".join(str(error).splitlines())}), flush=True)
            raise
        print(json.dumps(data, indent=2, allow_nan=False) if point is None else
              json.dumps({"point": point, **data}, allow_nan=False))
        sys.stdout.flush()
        return data

    def _project(self) -> dict:
        job = self.job or HANDOFF.take(handed_over_at())
        if job is None:  # a sweep point of another launcher than primus_local
            job = self.prepare_job(self.cfg, None)
            show_warnings(job)
        cfg = job.cfg
        world = projected_world_size(cfg)
        split = job.layout or unchecked_parallel_layout(cfg, world)  # None: a search from a layout a run refuses
        layout = projection_layout(cfg, split, world_nproc(cfg, world), adapter_class(cfg).traits)
        hardware = target_hardware(cfg, layout, fresh_measurement=bool(cfg.task.calibrate))
        data, projection = {"configured": None}, None
        if job.layout is not None:  # the configured layout (a search may start from one a run refuses)
            projection = project(cfg, layout, hardware)
            data = projection.to_dict()
            print(describe(projection, str(cfg.model.name)), file=sys.stderr)
        if cfg.task.search:
            data["search"] = run_search(cfg, layout, hardware)
        if cfg.task.calibrate:
            from primus_hydra.tasks.calibrate import calibrate

            if projection is None:
                raise ConfigValidationError(["task.calibrate=true runs the configured layout, which a run refuses "
                                             "(see the warning above)"])

            data["calibration"] = calibrate(cfg, projection)
        not_finite = non_finite_fields(data)
        if not_finite:  # inside the ranges every projection is finite: this is a bug's or a measurement's
            raise ConfigValidationError([f"the projection is not a finite number ({', '.join(not_finite[:4])}): "
                                         f"check the hardware entry's numbers ({hardware.peak_source} = "
                                         f"{hardware.peak_tflops:g} TFLOP/s) and the model's sizes"])
        return data


def projection_input_failures(cfg: DictConfig, world: int) -> list[str]:
    """What the run's own checks do not hold, one line each: task.top, the world size, every number of the
    hardware entry (as overridden, then the entry hardware=auto picks) and the platform's peak, in their ranges
    (config/schema_hardware.py: inside them every projection is finite)."""
    failures = []
    if int(cfg.task.top) < 1:
        failures.append(f"task.top={cfg.task.top}: must be >= 1 (how many ranked layouts task.search prints)")
    if world > MAX_WORLD:
        failures.append(f"{world_size_shown(cfg, world)}: task=projection projects up to {MAX_WORLD:,} ranks (more "
                        f"than any cluster built)")
    failures += hardware_number_failures(cfg.hardware)
    peak = cfg.platform.peak_tflops_per_device
    if isinstance(peak, (int, float)) and peak > 0:  # <= 0 is config/validate.py's to refuse
        failures += [line for line in [out_of_range("platform.peak_tflops_per_device", float(peak), PEAK_RANGE)] if line]
    if failures or str(cfg.hardware.name) != "auto":
        return failures

    entry = configured_hardware_entry(cfg)
    return hardware_number_failures(entry, where=f" (conf/hardware/{entry.name}.yaml, the entry hardware=auto picked)")


def world_size_shown(cfg: DictConfig, world: int) -> str:
    return f"launch.nnodes x launch.nproc_per_node = {cfg.launch.nnodes} x {world // int(cfg.launch.nnodes)} = {world:,} ranks"


def large_world_warning(cfg: DictConfig, world: int) -> str:
    return (f"{world_size_shown(cfg, world)}: more than the largest clusters built (about 200,000 devices); the "
            f"projection's network model was never checked at this scale (a mistyped launch.nnodes?)")


def non_finite_fields(data, path: str = "") -> list[str]:
    """The key paths of every NaN or infinite number in the projection's JSON (json.dumps would write `Infinity`,
    which no JSON parser reads)."""
    if isinstance(data, dict):
        return [field for key, value in data.items() for field in non_finite_fields(value, f"{path}{key}.")]
    if isinstance(data, list):
        return [field for index, value in enumerate(data) for field in non_finite_fields(value, f"{path}{index}.")]
    if isinstance(data, float) and not math.isfinite(data):
        return [f"{path.rstrip('.')}={data}"]
    return []


# a layout every world size accepts: what the rest of a config is checked with when task.search replaces its layout
LAYOUT_NEUTRAL = {"module.parallel.tp": 1, "module.parallel.pp": 1, "module.parallel.cp": 1, "module.parallel.ep": 1,
                  "module.parallel.dp": "auto", "module.parallel.fsdp": False, "module.parallel.sequence_parallel": False,
                  "module.micro_batch_size": 1, "module.global_batch_size": None,
                  "backend.virtual_stages_per_pipeline_rank": None, "backend.pipeline_layout": None}


def projected_world_size(cfg: DictConfig) -> int:
    """launch.nnodes x launch.nproc_per_node; `auto` is the GPUs this node shows (or 1 without any)."""
    nproc = auto_int(cfg.launch.nproc_per_node)
    if nproc is None:
        nproc = max(1, len(detect_gpus(os.environ).gpus))
    return int(cfg.launch.nnodes) * nproc


def world_nproc(cfg: DictConfig, world: int) -> int:
    return max(1, world // int(cfg.launch.nnodes))


def _targets_gpu(cfg: DictConfig) -> bool:
    return str(configured_hardware_entry(cfg).vendor) != "cpu"


def target_hardware(cfg: DictConfig, layout, *, fresh_measurement: bool = False):
    """The hardware entry's numbers; on the cpu entry, the matmul peak at the threads this machine gives a rank."""
    entry = configured_hardware_entry(cfg)
    threads, host_gib = 1, 0.0
    if str(entry.vendor) == "cpu":
        plan = build_resource_plan(cfg)
        threads = int(cfg.backend.get("num_threads") or plan.threads_per_worker)
        host_gib = plan.resources.ram_available_gib or 0.0
    return resolve_hardware(entry, precision=layout.precision, threads_per_rank=threads, host_memory_gib=host_gib,
                            ranks_per_node=layout.nproc_per_node, platform_peak=cfg.platform.peak_tflops_per_device,
                            fresh_measurement=fresh_measurement)


def run_search(cfg: DictConfig, layout, hardware) -> dict:
    from primus_hydra.projection.search import search, smallest_batch_split

    world, gpu = projected_world_size(cfg), hardware.vendor != "cpu"
    refusals: list[list[str]] = []

    def rejects(overrides: list[str]) -> list[str]:
        refusals.append(rejected_by_validation(cfg, overrides, world, gpu))
        return refusals[-1]

    ranked, projected, fitting = search(cfg, layout, hardware, top=int(cfg.task.top), rejects=rejects)
    if projected == 0:
        split = smallest_batch_split(cfg, layout)
        hint = (f"the smallest global batch a layout of {layout.world} ranks splits is {split} (a multiple of its "
                f"data-parallel size)" if split else f"no tp/pp/cp split of {cfg.model.name} fits {layout.world} ranks")
        raise ConfigValidationError([f"module.global_batch_size={cfg.module.global_batch_size}: no layout of "
                                     f"{layout.world} ranks splits it; {hint}"])
    if not ranked:
        found = (f"fits no layout of {layout.world} x {hardware.name} ({hardware.usable_memory_gib:.1f} GiB usable "
                 f"each; {projected} layouts projected)" if not fitting else
                 f"fits {fitting} of {projected} layouts of {layout.world} x {hardware.name} in memory, but a run "
                 f"refuses each ({refusals[0][0]})")
        raise ConfigValidationError([f"model {cfg.model.name} {found}; {smallest_world_hint(cfg, layout, hardware, gpu)}"])
    print(f"search: {projected} layouts projected, {fitting} fit {hardware.name}'s "
          f"{hardware.usable_memory_gib:.1f} GiB; the {len(ranked)} fastest that a run accepts:", file=sys.stderr)
    print(search_table(ranked), file=sys.stderr)
    print(f"best: python -m primus_hydra {' '.join(run_command(ranked[0].overrides))}", file=sys.stderr)
    return {"projected": projected, "fitting": fitting, "best_overrides": ranked[0].overrides,
            "top": [{"overrides": entry.overrides, **entry.projection.to_dict()} for entry in ranked]}


def smallest_world_hint(cfg: DictConfig, layout, hardware, gpu: bool) -> str:
    """Where the search would find a layout: the world size it names is validated there as a run would be."""
    from primus_hydra.projection.search import smallest_fitting_world

    nproc = layout.nproc_per_node

    def rejects_at(overrides: list[str], world: int) -> list[str]:
        return rejected_by_validation(cfg, [*overrides, f"launch.nnodes={world // nproc}"], world, gpu)

    smallest = smallest_fitting_world(cfg, layout, hardware, rejects_at)
    if smallest:
        return (f"the smallest world size where a layout fits is {smallest} ({smallest // nproc} nodes of {nproc}): "
                f"launch.nnodes={smallest // nproc}")
    return (f"no world size of whole nodes of {nproc} up to {MAX_WORLD:,} ranks has a layout that fits and splits "
            f"module.global_batch_size={cfg.module.global_batch_size}")


def run_command(layout_overrides: list[str]) -> list[str]:
    """The command line that trains with a searched layout: this command's own overrides, task=train instead of
    task=projection, the layout's keys replaced."""
    from primus_hydra.tasks.query import command_line_overrides

    given = command_line_overrides()
    replaced = {override.split("=", 1)[0] for override in layout_overrides}
    kept = [override for override in given if override.split("=", 1)[0].lstrip("+~") not in replaced
            and not override.startswith(("task=", "task.", "hardware="))]
    return ["task=train", *kept, *layout_overrides]


def rejected_by_validation(cfg: DictConfig, overrides: list[str], world: int, runs_on_gpu: bool) -> list[str]:
    """What the real run's checks say about `cfg` with these overrides ([] when it passes)."""
    import copy

    from omegaconf import OmegaConf, open_dict, read_write

    candidate = copy.deepcopy(cfg)
    with read_write(candidate), open_dict(candidate):
        for override in overrides:
            key, value = override.split("=", 1)
            OmegaConf.update(candidate, key, None if value == "null" else yaml_value(value), merge=False)
    try:
        prepare(candidate, world_size=world, on_this_machine=False, trains=False, runs_on_gpu=runs_on_gpu)
    except ConfigValidationError as error:
        return list(error.failures) if hasattr(error, "failures") else [str(error)]
    return []


def yaml_value(text: str):
    import yaml

    return yaml.safe_load(text)
