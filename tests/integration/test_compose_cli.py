"""Composing, printing, validating and planning from the command line, in fresh interpreters: user presets from
--config-dir, experiments, dotted option names, and no torch import on any of these paths."""
from __future__ import annotations

import subprocess
import sys

from helpers.compose import REPO


def test_config_dir_adds_a_users_model_preset(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "my_model.yaml").write_text(
        "name: my_model\nhidden_size: 512\nnum_layers: 2\nnum_attention_heads: 8\nnum_kv_heads: 8\n"
        "ffn_hidden_size: 1024\nvocab_size: 256\nmax_position_embeddings: 512\n"
    )
    result = subprocess.run([sys.executable, "-m", "primus_hydra", "--config-dir", str(tmp_path), "model=my_model", "--cfg", "job",
                             "-p", "model"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "hidden_size: 512" in result.stdout and "rope_theta: 10000.0" in result.stdout  # schema defaults filled in


def test_user_preset_with_a_stale_key_fails_at_composition(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "stale.yaml").write_text("name: stale\nmoe_force_load_balance: true\n")
    result = subprocess.run([sys.executable, "-m", "primus_hydra", "--config-dir", str(tmp_path), "model=stale", "--cfg", "job"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: model.moe_force_load_balance: Key 'moe_force_load_balance' not in 'ModelConfig'"


def test_dotted_preset_name_works_on_the_command_line():
    """`model=llama3.1_8b` (a dot in the option name) must compose through the real CLI too."""
    result = subprocess.run(
        [sys.executable, "-m", "primus_hydra", "model=llama3.1_8b", "--cfg", "job", "--package", "model"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "name: llama3.1_8b" in result.stdout
    assert "type: llama3" in result.stdout


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


def test_model_math_does_not_import_torch():
    code = "import primus_hydra.config.model_math, sys; assert 'torch' not in sys.modules, 'torch was imported'"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_preparing_and_planning_never_import_torch():
    code = (
        "import sys, os\n"
        "os.environ.update(PRIMUS_AUTO_NUM_GPUS='4', PRIMUS_AUTO_FREE_VRAM_GB='80')\n"
        "sys.path.insert(0, 'tests')\n"
        "from helpers.compose import compose_primus\n"
        "from primus_hydra.orchestrator.prepare import prepare\n"
        "cfg = compose_primus('launch.nproc_per_node=auto', 'module.micro_batch_size=2', 'module.compile=true')\n"
        "job = prepare(cfg, trains=False)\n"
        "assert job.cfg.launch.nproc_per_node == 4, job.cfg.launch.nproc_per_node\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_importing_the_adapters_imports_neither_torch_nor_a_backend_library():
    code = (
        "import sys\n"
        "for name in ('megatron', 'torchtitan', 'maxtext', 'megatron_bridge', 'hummingbirdxt', 'torch'):\n"
        "    __import__(f'primus_hydra.backends.{name}.adapter')\n"
        "__import__('primus_hydra.backends.megatron.patches')\n"
        "heavy = sorted(m for m in ('torch', 'jax', 'megatron', 'torchtitan', 'MaxText') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr



def _printed_by_console_script(tmp_path, code: str, *args: str) -> str:
    program = f"import gc, sys\n{code}\nsys.argv = ['primus-hydra', *{list(args)!r}]\n" \
              "from primus_hydra.__main__ import console_script\nconsole_script()\n"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_collector_is_paused_for_start_up_and_runs_with_the_task(tmp_path):
    """__main__.console_script: Python's collector off while a single run composes (not for a sweep's), on in its task."""
    main_sees = "import primus_hydra.cli as cli\ncli.main = lambda: print('collector', gc.isenabled())"
    assert _printed_by_console_script(tmp_path, main_sees, "module.train_iters=1") == "collector False\n"
    assert _printed_by_console_script(tmp_path, main_sees, "-m", "module.lr=1e-3,2e-3") == "collector True\n"
    task_sees = "import primus_hydra.tasks as tasks\ntasks.run_task = lambda cfg: print('task', gc.isenabled())"
    printed = _printed_by_console_script(tmp_path, task_sees, "module.train_iters=1", "hydra.run.dir=run")
    assert printed.splitlines()[-1] == "task True"
    printed = _printed_by_console_script(tmp_path, task_sees, "task.dry_run=true", "hydra.run.dir=dry")
    assert printed.splitlines()[-1] == "task False"  # a dry run writes the arguments and ends
