"""torchtitan 0.3's config functions: the module a dry run writes (backend.job_format=config_function, or auto with
torchtitan 0.3 installed) is imported next to the real 0.3 classes (scripts/setup.sh installs torchtitan 0.3.0 in
.venv/torchtitan-0.3, outside sys.path): it returns a Trainer.Config, torchtitan's own ConfigManager reads it back
equal, and the model it describes, built by torchtitan 0.3 on the meta device, has the project's model-math count.
Import only: torchtitan 0.3 needs torch >= 2.14 to train."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.compose import REPO, run_job
from primus_hydra.backends.torchtitan.args import build_torchtitan_job_config
from primus_hydra.backends.torchtitan.config_function import MODULE_NAME, render_config_function
from primus_hydra.config.layout import parallel_layout
from primus_hydra.config.model_math import count_parameters
from primus_hydra.errors import PrimusError

TORCHTITAN_03 = REPO / ".venv" / "torchtitan-0.3"
needs_torchtitan_03 = pytest.mark.skipif(not (TORCHTITAN_03 / "torchtitan").is_dir(),
                                         reason=f"torchtitan 0.3 is not in {TORCHTITAN_03} (bash scripts/setup.sh)")
PRESETS = ("llama_tiny", "llama3_8b", "llama3.1_8b", "llama3.1_70b", "llama2_7b")
CHECK = """
import dataclasses, importlib, json, logging, re, sys
import torch
from torchtitan.config import ConfigManager
from torchtitan.trainer import Trainer
sys.path.insert(0, "tests")
from helpers.compose import compose_primus
from primus_hydra.backends.base import load_adapter
from primus_hydra.config.layout import parallel_layout

logging.disable(logging.WARNING)  # torchtitan's notes about the tokenizer folder a dry run does not write
found = {}
for folder in sys.argv[1:]:
    sys.path.insert(0, folder)
    sys.modules.pop("primus_torchtitan_job", None)
    job = importlib.import_module("primus_torchtitan_job").primus_job()
    parsed = ConfigManager().parse_args(["--module", "primus_torchtitan_job", "--config", "primus_job"])
    with torch.device("meta"):
        model = job.model_spec.model.build()
    differ = [f.name for f in dataclasses.fields(job) if f.name != "model_spec" and getattr(job, f.name) != getattr(parsed, f.name)]
    found[folder] = {
        "trainer_config": isinstance(job, Trainer.Config), "differ": differ,
        # the model's initialisers are closures made at each call: the same functions at new addresses
        "same_model": re.sub(" at 0x[0-9a-f]+", "", repr(parsed.model_spec)) == re.sub(" at 0x[0-9a-f]+", "", repr(job.model_spec)), "flavor": job.model_spec.flavor,
        "params": sum(p.numel() for p in model.parameters()),
        "training": dataclasses.asdict(job.training), "parallelism": dataclasses.asdict(job.parallelism),
        "optimizer": job.optimizer.param_groups[0].optimizer_kwargs, "seed": job.debug.seed,
        "warmup": job.lr_scheduler.warmup_steps, "decay": job.lr_scheduler.decay_type,
    }
    sys.path.remove(folder)
cfg = compose_primus("backend=torchtitan")
found["auto"] = load_adapter(cfg, parallel_layout(cfg, 1)).job_format
print(json.dumps(found))
"""


def _dry_run_module(compose_config, run_dir: Path, *overrides: str) -> Path:
    run_job(compose_config("task.dry_run=true", "backend=torchtitan", "backend.job_format=config_function",
                           "module.data.source=mock", *overrides), run_dir)
    return run_dir / f"{MODULE_NAME}.py"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    from helpers.compose import compose_primus

    folders = {}
    for name in PRESETS:
        folder = tmp_path_factory.mktemp(name.replace(".", "_"))
        _dry_run_module(lambda *o: compose_primus(*o), folder, f"model={name}")
        folders[name] = str(folder)
    fsdp = tmp_path_factory.mktemp("fsdp_tp")
    _dry_run_module(lambda *o: compose_primus(*o), fsdp, "model=llama3_8b", "launch.nproc_per_node=8",
                    "module.parallel.fsdp=true", "module.parallel.tp=2", "module.global_batch_size=64",
                    "module.micro_batch_size=2", "module.lr=2e-4", "module.seed=7", "module.warmup_iters=3")
    folders["fsdp_tp"] = str(fsdp)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TORCHTITAN_03), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", CHECK, *folders.values()], capture_output=True, text=True,
                            cwd=REPO, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.splitlines()[-1])
    return {name: found[folder] for name, folder in folders.items()} | {"auto": found["auto"]}


@needs_torchtitan_03
@pytest.mark.parametrize("name", PRESETS)
def test_the_config_function_is_a_0_3_trainer_config_that_torchtitan_reads_back_equal(checked, name):
    job = checked[name]
    assert job["trainer_config"] and job["differ"] == [] and job["same_model"]


@needs_torchtitan_03
@pytest.mark.parametrize("name", PRESETS)
def test_torchtitan_0_3_builds_the_model_with_the_model_math_count(checked, compose_config, name):
    assert checked[name]["params"] == count_parameters(compose_config(f"model={name}").model)


@needs_torchtitan_03
def test_llama3_8b_is_torchtitans_8b_flavor_with_metas_count(checked):
    assert (checked["llama3_8b"]["flavor"], checked["llama3_8b"]["params"]) == ("8B", 8_030_261_248)


@needs_torchtitan_03
def test_the_layout_and_training_knobs_reach_the_0_3_config(checked):
    job = checked["fsdp_tp"]
    assert {k: job["parallelism"][k] for k in ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                                               "tensor_parallel_degree", "pipeline_parallel_degree")} == {
        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 4, "tensor_parallel_degree": 2,
        "pipeline_parallel_degree": 1}
    assert {k: job["training"][k] for k in ("local_batch_size", "global_batch_size", "seq_len")} == {
        "local_batch_size": 2, "global_batch_size": 64, "seq_len": 256}
    assert job["optimizer"]["lr"] == 2e-4 and job["optimizer"]["betas"] == [0.9, 0.95]
    assert (job["seed"], job["warmup"], job["decay"]) == (7, 3, "cosine")


@needs_torchtitan_03
def test_auto_writes_the_installed_generation(checked, compose_config):
    from primus_hydra.backends.base import load_adapter

    assert checked["auto"] == "config_function"  # torchtitan 0.3 on the path
    cfg = compose_config("backend=torchtitan")
    expected = "toml" if not str(load_adapter(cfg, parallel_layout(cfg, 1)).detect_backend_version() or "").startswith("0.3") else "config_function"
    assert load_adapter(cfg, parallel_layout(cfg, 1)).job_format == expected


def test_a_dry_run_writes_the_toml_generation_by_default(compose_config, tmp_path):
    run_job(compose_config("task.dry_run=true", "backend=torchtitan", "backend.job_format=toml"), tmp_path)
    text = (tmp_path / "torchtitan_job.toml").read_text()
    assert '[model]\nname = "llama3"' in text and "[model_args]" not in text and not (tmp_path / f"{MODULE_NAME}.py").exists()


@pytest.mark.parametrize("extra, line", [
    ("+backend.extra_args.profiling.enable_profiling=true",
     "backend.extra_args.profiling: the torchtitan 0.3 config function has no profiling section"),
    ("+backend.extra_args.job.print_args=true",
     "backend.extra_args.job.print_args: the torchtitan 0.3 config function reads only description, dump_folder of job"),
    ("+backend.extra_args.training.bogus=1", "backend.extra_args.training.bogus: torchtitan 0.3's TrainingConfig has no such field"),
])
def test_what_the_0_3_config_function_cannot_hold_is_one_line(compose_config, extra, line):
    cfg = compose_config("backend=torchtitan", "module.data.source=mock", extra)
    with pytest.raises(PrimusError) as error:
        render_config_function(build_torchtitan_job_config(cfg, None, parallel_layout(cfg, 1)))
    assert str(error.value).startswith(line) and "\n" not in str(error.value)
