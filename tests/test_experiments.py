"""Every recipe in conf/experiment composes, passes validation (the generic rules and its backend's own), and
exports its backend's arguments in a dry run; the CLI prints one without importing torch."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from hydra.utils import get_class

from primus_hydra.config.validate import validate_config
from primus_hydra.runtime.distributed_env import DistributedEnv
from primus_hydra.runtime.train_runtime import PrimusRuntime

from conftest import CONF_DIR, REPO

EXPERIMENTS = sorted(path.stem for path in (CONF_DIR / "experiment").glob("*.yaml"))
REQUIRED = {
    "llama3_8b_pretrain_megatron", "llama3_8b_pretrain_torchtitan", "deepseek_v2_lite_pretrain_megatron",
    "llama3.1_8b_pretrain_maxtext", "tiny_smoke",
}


def test_the_required_recipes_exist():
    assert REQUIRED <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_is_a_global_package_recipe(experiment):
    text = (CONF_DIR / "experiment" / f"{experiment}.yaml").read_text()
    assert text.startswith("# @package _global_\n")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_validates(compose_config, experiment):
    cfg = compose_config(f"experiment={experiment}")
    validate_config(cfg)
    adapter = get_class(cfg.backend._target_)(cfg=cfg, run_dir="/tmp/unused", dist=DistributedEnv(launcher="single"))
    assert adapter.validate() == []


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_exports_its_backend_arguments_in_a_dry_run(compose_config, tmp_path, experiment):
    cfg = compose_config(f"experiment={experiment}", "task.dry_run=true")
    path = PrimusRuntime(cfg, run_dir=tmp_path).run()
    assert path == tmp_path / "backend_args.yaml"
    assert yaml.safe_load(path.read_text())


def test_llama3_8b_megatron_recipe_selects_its_groups(compose_config):
    cfg = compose_config("experiment=llama3_8b_pretrain_megatron")
    assert (cfg.backend.name, cfg.model.name, cfg.launch.nproc_per_node) == ("megatron", "llama3_8b", 8)
    assert str(cfg.module.data.source.value) == "mock"


def test_cli_prints_an_experiment_without_importing_torch():
    code = (
        "import sys\n"
        "sys.argv = ['primus_hydra', 'experiment=llama3_8b_pretrain_megatron', '--cfg', 'job']\n"
        "from primus_hydra.cli import main\n"
        "main()\n"
        "assert 'torch' not in sys.modules, 'composing and printing imported torch'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "hidden_size: 4096" in result.stdout and "name: megatron" in result.stdout


def test_cli_module_entry_point_prints_an_experiment():
    result = subprocess.run(
        [sys.executable, "-m", "primus_hydra", "experiment=llama3_8b_pretrain_megatron", "--cfg", "job"],
        capture_output=True, text=True, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
