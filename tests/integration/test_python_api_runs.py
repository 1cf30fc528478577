"""The Python API for real: primus_hydra.compose + primus_hydra.run train, plan and dry-run as the command line
does; Hydra's Compose API reads `primus_hydra.conf`; the command line's shell completion and help name a command
that works for the `python -m primus_hydra` form too."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback

import primus_hydra
from helpers.cli import clean_env, primus
from helpers.overrides import QUIET_LOGS, SMALL_BATCHES
from primus_hydra.errors import PrimusError

FAST = [*SMALL_BATCHES, "module.warmup_iters=2", *QUIET_LOGS, "module.checkpoint.save_final=false"]


def _printed_by(code: str, cwd: Path) -> str:
    """What a fresh interpreter prints running `code` in `cwd` (which it must run without an error)."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=clean_env(),
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.slow  # trains for a few seconds
def test_a_job_run_in_its_run_dir_trains_on_a_relative_data_path_and_returns_its_objective(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tiny.txt").write_text(" ".join(["the quick brown fox jumps over the lazy dog"] * 200))
    cfg = primus_hydra.compose([*FAST, "module.train_iters=3", "module.data.path=data/tiny.txt", "hydra.job.chdir=true",
                                "module.eval_interval=3", "module.eval_iters=1"])

    objective = primus_hydra.run(cfg, "run")

    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # task.objective=auto with evaluation on: the held-out loss after the last step
    assert isinstance(objective, float) and objective == records[-1]["eval_loss"] and records[-1]["step"] == 3
    assert (tmp_path / "run" / ".hydra" / "config.yaml").is_file() and (tmp_path / "run" / "primus.log").is_file()
    assert Path.cwd() == tmp_path and not HydraConfig.initialized()  # the run changed into its dir, and back


def test_task_plan_returns_the_plan_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    plan = primus_hydra.run(primus_hydra.compose(["task=plan"]))

    assert plan["nproc_per_node"] == 1 and json.loads(capsys.readouterr().out) == plan
    assert list(tmp_path.iterdir()) == []


class RecordingCallback(Callback):
    """A user's own Hydra callback (hydra.callbacks.<name>), recording what it was told."""

    seen: list[str] = []

    def on_run_start(self, config, **kwargs):
        self.seen.append("run_start")

    def on_job_start(self, config, **kwargs):
        self.seen.append("job_start")

    def on_run_end(self, config, job_return=None, **kwargs):
        self.seen.append(f"run_end {job_return.status.name}")


def test_a_users_own_hydra_callbacks_see_the_run_as_on_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    RecordingCallback.seen.clear()

    primus_hydra.run(primus_hydra.compose(["task=plan", f"+hydra.callbacks.mine._target_={__name__}.RecordingCallback"]))

    assert RecordingCallback.seen == ["run_start", "job_start", "run_end COMPLETED"]


def test_a_dry_run_writes_the_backends_arguments_into_the_run_dir(tmp_path):
    objective = primus_hydra.run(primus_hydra.compose(["task.dry_run=true"]), tmp_path / "run")

    assert math.isnan(objective)  # it trained nothing: no objective (what a sweeper records as a failed trial)
    assert (tmp_path / "run" / "backend_args.yaml").is_file()
    assert (tmp_path / "run" / ".hydra" / "overrides.yaml").read_text() == "- task.dry_run=true\n"


def test_the_api_raises_the_line_the_command_line_prints(tmp_path):
    with pytest.raises(PrimusError) as raised:
        primus_hydra.compose(["model=nope"])
    assert primus("model=nope", "--cfg", "job", cwd=tmp_path).stderr == f"error: {raised.value}\n"


def test_importing_the_package_loads_neither_hydra_nor_the_api(tmp_path):
    code = "import sys, primus_hydra\nprint(sorted(m for m in sys.modules if m.startswith(('hydra', 'primus_hydra.api'))))"
    assert _printed_by(code, tmp_path) == "[]"


def test_composing_through_the_api_imports_no_torch(tmp_path):
    assert _printed_by("import sys, primus_hydra\n"
                       "cfg = primus_hydra.compose(['backend=megatron', 'model=llama3_8b'])\n"
                       "assert cfg.model.num_kv_heads == 8\n"
                       "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron')))", tmp_path) == "[]"


def test_hydras_compose_api_reads_primus_hydra_conf_with_its_schemas(tmp_path):
    printed = _printed_by("from hydra import compose, initialize_config_module\n"
                          "with initialize_config_module('primus_hydra.conf', version_base='1.3'):\n"
                          "    cfg = compose('config', overrides=['backend=megatron'])\n"
                          "print(cfg.backend.name, cfg.backend.tokenizer_type)", tmp_path)
    assert printed == "megatron HuggingFaceTokenizer"  # a default of the schema, not of conf/backend/megatron.yaml


def test_the_module_forms_bash_completion_completes_group_options(tmp_path):
    script = Path(sys.executable).parent / "primus-hydra"
    assert script.is_file(), "the console script is installed next to the interpreter"
    install = primus("--shell-completion", "install=bash", cwd=tmp_path)
    assert install.returncode == 0, install.stderr
    shell = ('eval "$INSTALL"\n'
             'COMP_LINE="primus-hydra model=llama3 backend=me"; COMP_POINT=${#COMP_LINE}\n'
             'COMP_WORDS=($COMP_LINE); COMP_CWORD=2\n'
             'hydra_bash_completion\n'
             'printf "%s\\n" "${COMPREPLY[@]}"\n')
    env = clean_env({"INSTALL": install.stdout, "PATH": f"{script.parent}{os.pathsep}{os.environ['PATH']}"})
    completed = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["backend=megatron", "backend=megatron_bridge"]


def test_hydra_help_suggests_the_console_script_for_the_module_form(tmp_path):
    help_text = primus("--hydra-help", cwd=tmp_path).stdout
    assert 'eval "$(primus-hydra -sc install=bash)"' in help_text and "__main__.py" not in help_text
