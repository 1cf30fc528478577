"""The command line as a user types it: one real default-style run, printing configs without torch, sweeps,
and one clear line with exit code 2 for every malformed input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUICK_RUN = ["module.train_iters=12", "module.warmup_iters=2", "module.log.interval=4", "module.seq_length=64", "module.checkpoint.interval=6"]


def primus(*args: str, output_root: Path, extra_env: dict | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRIMUS_OUTPUT_ROOT": str(output_root), **(extra_env or {})}
    env.pop("HYDRA_FULL_ERROR", None)
    output_root.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "primus_hydra", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=output_root)


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("**/.hydra"))


def test_default_run_trains_and_fills_the_run_dir(tmp_path):
    result = primus(*QUICK_RUN, output_root=tmp_path)
    assert result.returncode == 0, result.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 12 and records[-1]["loss"] < records[0]["loss"]
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_0000012"
    assert (run_dir / "loss_curve.png").is_file() and (run_dir / "logs" / "rank_0.log").is_file()
    assert "step 12/12 | loss" in result.stdout + result.stderr


def test_print_megatron_config_without_importing_torch(tmp_path):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "primus_hydra", "backend=megatron", "model=llama3_8b", "--cfg", "job"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "hidden_size: 4096" in result.stdout and "_target_: primus_hydra.backends.megatron.adapter.MegatronAdapter" in result.stdout
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "hydra" in imported
    assert list(tmp_path.iterdir()) == []  # printing a config has no side effects


def test_info_defaults_lists_the_groups(tmp_path):
    result = primus("--info", "defaults", output_root=tmp_path)
    assert result.returncode == 0
    for entry in ("primus_schema", "platform/local", "module/pre_trainer", "model/llama_tiny", "backend/torch", "task/train"):
        assert entry in result.stdout


def test_multirun_sweep_runs_each_point(tmp_path):
    result = primus("-m", "module.lr=1e-3,3e-3", "module.train_iters=2", "module.warmup_iters=0", "module.seq_length=32", "module.log.tensorboard=false",
                    "module.log.plot=false", output_root=tmp_path)
    assert result.returncode == 0, result.stderr
    sweep_points = run_dirs(tmp_path)
    assert [p.name for p in sweep_points] == ["0", "1"]
    assert all((p / "metrics.jsonl").is_file() for p in sweep_points)


def test_dry_run_writes_backend_arguments(tmp_path):
    result = primus("task.dry_run=true", output_root=tmp_path)
    assert result.returncode == 0, result.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert "  grad_accum: 1\n" in (run_dir / "backend_args.yaml").read_text()  # the layout the job was prepared with
    assert not (run_dir / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["model=llama_huge"], "error: model=llama_huge is not an option of group 'model'; available: deepseek_v2_lite, deepseek_v3,"),
        (["backend=jax"], "error: backend=jax is not an option of group 'backend'; available: hummingbirdxt, maxtext, megatron,"),
        (["model.hidden_sise=10"], "error: model.hidden_sise: Key 'hidden_sise' not in 'ModelConfig'"),
        (["module.lr=fast"], "error: module.lr: Value 'fast' of type 'str' could not be converted to Float"),
        (["module.precision=fp8"], "error: module.precision: Invalid value 'fp8', expected one of [fp32, bf16]"),
        (["model.hidden_size=???"], "error: model.hidden_size: mandatory value is missing (???)"),
        (["launch.nproc_per_node=2", "module.parallel.dp=1"], "error: world size 2 != tp*pp*cp*dp = 1*1*1*1; set module.parallel.dp=auto or 2"),
        (["module.data.path=/no/such/corpus"], "error: module.data.path=/no/such/corpus: no such file or folder"),
        (["module.checkpoint.resume=/no/such/ckpt"], "error: module.checkpoint.resume=/no/such/ckpt: no such checkpoint"),
        (["patches.modules=[no_such_patch_module]"], "error: patches.modules: cannot import 'no_such_patch_module'"),
        (["backend=maxtext", "module.data.source=mock"], "error: backend=maxtext: training through MaxText is not integrated yet"),
        (["backend=megatron", "model=moe_tiny", "launch.nproc_per_node=2", "module.parallel.tp=2"],
         "error: module.parallel.tp=2 with MoE (model=moe_tiny): megatron-core requires sequence parallelism"),
    ],
    ids=["unknown_model", "unknown_backend", "unknown_key", "wrong_type", "bad_enum", "missing_value", "world_layout",
         "missing_data", "missing_checkpoint", "bad_patch_module", "backend_not_integrated", "megatron_layout"],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, expected):
    result = primus(*args, "module.train_iters=2", "module.warmup_iters=0", output_root=tmp_path)
    assert result.returncode == 2, result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and error_lines[0].startswith(expected), result.stderr
    assert "Traceback" not in result.stderr
    for run_dir in run_dirs(tmp_path):  # nothing trained, nothing checkpointed
        assert not (run_dir / "metrics.jsonl").exists() and not (run_dir / "checkpoints").exists()


def test_corrupt_checkpoint_to_resume_names_the_file(tmp_path):
    first = primus(*QUICK_RUN, "module.log.tensorboard=false", output_root=tmp_path / "a")
    assert first.returncode == 0, first.stderr
    (run_dir,) = run_dirs(tmp_path / "a")
    (run_dir / "checkpoints" / "step_0000012" / "trainer_state.pt").write_bytes(b"garbage")
    result = primus(*QUICK_RUN, f"module.checkpoint.resume={run_dir / 'checkpoints'}", output_root=tmp_path / "b")
    assert result.returncode == 2
    assert "trainer_state.pt has 7 bytes, expected" in result.stderr and "Traceback" not in result.stderr


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "primus-hydra"
    result = subprocess.run([str(script), "--cfg", "job", "-p", "model"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "name: llama_tiny" in result.stdout


@pytest.mark.parametrize("args", [["module.lr=-1"], ["model.num_kv_heads=3"], ["+model.stale_field=1"], ["model=nope"]])
def test_an_invalid_config_leaves_no_run_dir(tmp_path, args):
    result = primus(*args, output_root=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: ")
    assert list(tmp_path.iterdir()) == []


def test_user_patch_module_registers_through_the_hydra_callback_and_runs(tmp_path):
    (tmp_path / "my_patches.py").write_text(
        "from dataclasses import replace\n"
        "from pathlib import Path\n"
        "from primus_hydra.patches import register_patch\n\n"
        "@register_patch('user.args.short_log', backend='torch', phase='build_args', priority=90)\n"
        "def short_log(ctx):\n"
        "    args = ctx.backend_args  # backend=torch: frozen typed arguments, changed by replacing them\n"
        "    log = replace(args.module.log, interval=1)\n"
        "    ctx.backend_args = replace(args, module=replace(args.module, log=log))\n\n"
        "@register_patch('user.after_train.marker', phase='after_train')\n"
        "def marker(ctx):\n"
        "    Path(ctx.run_dir, 'patched.txt').write_text(str(ctx.backend_args.module.log.interval))\n"
    )
    result = primus("patches.modules=[my_patches]", "module.train_iters=2", "module.warmup_iters=0", "module.seq_length=32",
                    "module.log.tensorboard=false", "module.log.plot=false", output_root=tmp_path,
                    extra_env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert (run_dir / "patched.txt").read_text() == "1"
    log = (run_dir / "logs" / "rank_0.log").read_text()
    assert "patch applied: user.args.short_log [build_args]" in log and "patch applied: user.after_train.marker [after_train]" in log


def test_a_build_args_patch_of_the_device_is_what_the_trainer_sets_up(tmp_path):
    """The torch trainer takes its device from its typed arguments, as the build_args patches left them."""
    (tmp_path / "gpu_patch.py").write_text(
        "from dataclasses import replace\n"
        "from primus_hydra.patches import register_patch\n\n"
        "@register_patch('user.args.gpu', backend='torch', phase='build_args')\n"
        "def gpu(ctx):\n"
        "    ctx.backend_args = replace(ctx.backend_args, device='cuda')\n"
    )
    result = primus("patches.modules=[gpu_patch]", "platform.device=cpu", *QUICK_RUN, output_root=tmp_path,
                    extra_env={"PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode != 0
    assert "torch sees no GPU" in result.stderr


def test_primus_patches_none_disables_every_patch(tmp_path):
    result = primus("task.dry_run=true", output_root=tmp_path, extra_env={"PRIMUS_PATCHES": "none"})
    assert result.returncode == 0, result.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert "patch applied" not in (run_dir / "logs" / "rank_0.log").read_text()


def test_sigterm_with_on_signal_checkpoints_a_single_process_run(tmp_path):
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    process = subprocess.Popen([sys.executable, "-m", "primus_hydra", f"hydra.run.dir={tmp_path / 'run'}", "module.train_iters=100000",
                                "module.seq_length=32", "module.checkpoint.on_signal=true", "module.log.tensorboard=false"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 2):
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert [line for line in stderr.splitlines() if line.startswith("error:")][0].startswith("error: stopped by SIGTERM at step")
    step = int((tmp_path / "run" / "checkpoints" / "latest").read_text().strip().removeprefix("step_"))
    assert step == len(metrics.read_text().splitlines())
