"""A job is prepared once: the process that composes it validates and plans it one time, and a rejected job
leaves nothing behind, whatever rejected it. Counted in a real `python -m primus_hydra` process."""
from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from helpers.cli import clean_env, primus, run_dirs

# Runs the CLI with counters around the functions that validate, plan, lay out and translate a job (the plan sizes
# ranks by the prepared layout: it derives none of its own); every call is one line in $PRIMUS_TEST_COUNTS, from
# whichever process makes it (the composing one, or a worker forked from it).
COUNTING = (
    "import os, runpy, sys\n"
    "def counted(module, name, label=None):\n"
    "    import importlib\n"
    "    owner = importlib.import_module(module)\n"
    "    original = getattr(owner, name)\n"
    "    def wrapper(*args, **kwargs):\n"
    "        with open(os.environ['PRIMUS_TEST_COUNTS'], 'a') as calls:\n"
    "            calls.write((label or name) + '\\n')\n"
    "        return original(*args, **kwargs)\n"
    "    setattr(owner, name, wrapper)\n"
    "counted('primus_hydra.orchestrator.prepare', 'validate_config')\n"
    "counted('primus_hydra.orchestrator.prepare', 'build_resource_plan')\n"
    "counted('primus_hydra.orchestrator.prepare', 'prepare')\n"
    "counted('primus_hydra.orchestrator.prepare', 'parallel_layout')\n"
    "counted('primus_hydra.config.layout', 'layout_failures')\n"
    "counted('primus_hydra.orchestrator.plan', 'unchecked_parallel_layout')\n"
    "counted('primus_hydra.orchestrator.prepare', 'translate', 'translate (prepare)')\n"
    "counted('primus_hydra.runtime.train_runtime', 'translate', 'translate (worker)')\n"
    "sys.argv = ['primus_hydra', *sys.argv[1:]]\n"
    "runpy.run_module('primus_hydra', run_name='__main__')\n"
)
QUICK = ["module.train_iters=2", "module.warmup_iters=0", "module.seq_length=32", "module.log.tensorboard=false",
         "module.log.plot=false", "module.log.progress_bar=false", "module.checkpoint.save_final=false"]


def counts_of(tmp_path, *args: str) -> dict:
    calls = tmp_path / "calls.txt"
    calls.touch()
    result = subprocess.run([sys.executable, "-c", COUNTING, *args], capture_output=True, text=True, cwd=tmp_path,
                            env=clean_env({"PRIMUS_OUTPUT_ROOT": str(tmp_path), "PRIMUS_TEST_COUNTS": str(calls)}),
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(collections.Counter(calls.read_text().splitlines()))


@pytest.mark.parametrize("args", [
    ["task.dry_run=true"],
    QUICK,
    [*QUICK, "launch.nproc_per_node=2", "module.global_batch_size=16"],  # the orchestrator of two workers
    ["task=plan"],
], ids=["dry_run", "one_process", "two_workers", "plan"])
def test_the_composing_process_prepares_the_job_once(tmp_path, args):
    counts = counts_of(tmp_path, *args)
    translated = {} if args == ["task=plan"] else {"translate (prepare)": 1}  # workers translate nothing
    assert counts == {"prepare": 1, "validate_config": 1, "build_resource_plan": 1, "parallel_layout": 1,
                      "layout_failures": 1, **translated}


@pytest.mark.parametrize("args, expected", [
    (["module.data.path=/no/such/corpus"], "error: module.data.path=/no/such/corpus: no such file or folder"),
    (["module.checkpoint.resume=/no/such/ckpt"], "error: module.checkpoint.resume=/no/such/ckpt: no such checkpoint"),
    (["module.parallel.fsdp=true"], "error: module.parallel.fsdp=true needs dp > 1 to shard over"),
    (["patches.enabled=no.such.patch"], "error: PRIMUS_PATCHES / patches.enabled name unknown patch ids: no.such.patch"),
    (["module.lr=${oc.env:PRIMUS_TEST_UNSET_VARIABLE}"], "error: module.lr: KeyError raised while resolving interpolation"),
    (["patches.modules=[no_such_patch_module]"], "error: patches.modules: cannot import 'no_such_patch_module'"),
    (["launch.nproc_per_node=3", "module.parallel.tp=2"], "error: world size 3 (launch.nnodes x launch.nproc_per_node)"),
    (["backend=maxtext", "module.data.source=mock"], "error: backend=maxtext: training through MaxText is not integrated yet"),
    (["backend=megatron", "model=moe_tiny", "launch.nproc_per_node=2", "module.parallel.tp=2"],
     "error: module.parallel.tp=2 with MoE (model=moe_tiny): megatron-core requires sequence parallelism"),
    (["backend=torchtitan", "model=moe_tiny", "module.data.source=mock"],
     "error: model=moe_tiny: backend=torchtitan trains the llama, qwen3, deepseek, llama4, gpt_oss families"),
], ids=["data_path", "resume_path", "backend_rule", "patch_id", "interpolation", "patch_module", "layout",
        "backend_not_integrated", "megatron_layout", "torchtitan_family"])
def test_a_rejected_run_leaves_no_run_dir(tmp_path, args, expected):
    result = primus(*args, cwd=tmp_path, env={"PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[0].startswith(expected), result.stderr
    assert not (tmp_path / "out").exists() and run_dirs(tmp_path) == []


def test_a_fresh_run_in_an_earlier_runs_dir_is_rejected_before_hydra_writes_there(tmp_path):
    run = tmp_path / "run"
    first = primus(f"hydra.run.dir={run}", *QUICK, "module.checkpoint.save_final=true", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    config_before = (run / ".hydra" / "config.yaml").read_text()
    second = primus(f"hydra.run.dir={run}", *QUICK, "module.seed=5", cwd=tmp_path)
    assert second.returncode == 2
    assert second.stderr.splitlines()[0].startswith(f"error: module.checkpoint.dir={run / 'checkpoints'} already holds")
    assert (run / ".hydra" / "config.yaml").read_text() == config_before  # the earlier run's record is intact


def test_a_basic_sweep_prepares_each_point_once(tmp_path):
    counts = counts_of(tmp_path, "-m", *QUICK, "module.lr=1e-3,2e-3", "hydra/launcher=basic")
    assert counts == {"prepare": 2, "validate_config": 2, "build_resource_plan": 2, "parallel_layout": 2,
                      "layout_failures": 2, "translate (prepare)": 2}


def test_a_basic_sweep_with_a_bad_point_stops_before_any_point_runs(tmp_path):
    result = primus("-m", *QUICK, "module.adam_eps=1e-8,-1", "hydra/launcher=basic",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: [job 1: ") and "module.adam_eps=-1" in line.split("]")[0]
    assert line.endswith("] module.adam_eps=-1.0: must be > 0")
    assert not (tmp_path / "sweep").exists()  # not even Hydra's multirun.yaml: the sweep never started
