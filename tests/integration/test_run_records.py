"""What a run records about itself and the commands that read it, on a local run: .primus/provenance.json written
before the first step and appended to (never rewritten) by a resume; task=cancel stops the run through its
run-dir lock's pid and it checkpoints on the signal; task=logs prints its logs; task=diff compares two runs."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import clean_env, error_lines, primus
from helpers.overrides import QUIET_LOGS

pytestmark = pytest.mark.slow  # trains for seconds

REPO = Path(__file__).resolve().parents[2]
RUN = ["module.warmup_iters=0", "module.seq_length=32", "module.micro_batch_size=2", "module.global_batch_size=2",
       *QUIET_LOGS, "module.log.interval=1", "module.checkpoint.interval=0", "module.checkpoint.save_final=false"]


def wait_for_steps(metrics: Path, steps: int, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not metrics.exists() or len(metrics.read_text().splitlines()) < steps:
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"no step {steps} in {timeout} s"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A long run cancelled by task=cancel after its first step, then resumed to one step past its checkpoint."""
    root = tmp_path_factory.mktemp("records")
    run_dir = root / "run"
    process = subprocess.Popen([sys.executable, "-m", "primus_hydra", f"hydra.run.dir={run_dir}", *RUN,
                                "module.train_iters=100000", "module.checkpoint.on_signal=true"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=root,
                               start_new_session=True)  # its own process group, as a run started from a shell
    try:
        wait_for_steps(run_dir / "metrics.jsonl", 1, process)
        first_record = json.loads((run_dir / ".primus" / "provenance.json").read_text())
        cancel = primus("task=cancel", f"task.run={run_dir}", cwd=root)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    step = int((run_dir / "checkpoints" / "latest").read_text().strip().removeprefix("step_"))
    resume = primus(f"hydra.run.dir={run_dir}", *RUN, f"module.train_iters={step + 1}",
                    "module.checkpoint.resume=auto", cwd=root)
    assert resume.returncode == 0, resume.stderr[-3000:]
    return {"dir": run_dir, "root": root, "first_record": first_record, "cancel": cancel, "exit": process.returncode,
            "stderr": stderr, "step": step}


def test_provenance_records_command_code_packages_and_data_before_the_first_step(run):
    record = run["first_record"]  # read when the first step was logged
    assert record["launcher"] == "this_process" and len(record["starts"]) == 1
    assert "module.train_iters=100000" in record["command"]["overrides"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert record["git"]["commit"] == (head or None)
    if record["git"]["dirty"]:
        assert (run["dir"] / ".primus" / "git.diff").read_text().startswith("diff --git")
    assert record["code_digest"].startswith("sha256:")
    assert {"torch", "hydra-core", "omegaconf"} <= set(record["packages"])
    assert record["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    (data,) = record["data"]  # the default text source: Python's own sources, named by its version
    assert data["python_stdlib"] == record["python"]["version"]


def test_a_resume_appends_a_start_and_rewrites_nothing_else(run):
    record = json.loads((run["dir"] / ".primus" / "provenance.json").read_text())
    first = run["first_record"]
    assert {key: value for key, value in record.items() if key != "starts"} == \
        {key: value for key, value in first.items() if key != "starts"}
    assert record["starts"][0] == first["starts"][0] and len(record["starts"]) == 2
    assert "module.checkpoint.resume=auto" in record["starts"][1]["command"]["overrides"]


def test_cancel_signals_the_local_run_which_checkpoints_and_stops(run):
    assert run["cancel"].returncode == 0, run["cancel"].stderr
    assert run["cancel"].stdout.startswith("cancelled local run (pid ")
    assert run["exit"] == 128 + signal.SIGTERM
    assert run["step"] >= 1  # module.checkpoint.on_signal: a checkpoint at the end of the step the signal came in
    assert json.loads((run["dir"] / ".primus" / "cancel.json").read_text())["pid"] > 0
    again = primus("task=cancel", f"task.run={run['dir']}", cwd=run["root"])  # ended: nothing to cancel
    assert again.returncode == 0 and again.stdout.startswith("not running: ")


def test_logs_prints_the_last_lines_of_the_run_and_of_a_rank(run):
    result = primus("task=logs", f"task.run={run['dir']}", "task.lines=2", cwd=run["root"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == (run["dir"] / "primus.log").read_text().splitlines()[-2:]
    rank = primus("task=logs", f"task.run={run['dir']}", "task.rank=0", "task.lines=1", "task.follow=true",
                  cwd=run["root"])  # the run has ended: follow prints and returns
    assert rank.stdout.splitlines() == (run["dir"] / "logs" / "rank_0.log").read_text().splitlines()[-1:]


def test_diff_names_the_overrides_config_keys_and_code_that_differ(run):
    other = run["root"] / "dry"
    dry = primus(f"hydra.run.dir={other}", *RUN, "module.train_iters=7", "module.lr=0.01", "task.dry_run=true",
                 cwd=run["root"])
    assert dry.returncode == 0, dry.stderr[-3000:]
    result = primus("task=diff", f"task.a={run['dir']}", f"task.b={other}", cwd=run["root"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # .hydra/overrides.yaml holds the resume's overrides (Hydra rewrites it); provenance.json kept the first's
    assert f"  module.train_iters: {run['step'] + 1} -> 7" in lines and "  module.lr: (absent) -> 0.01" in lines
    assert any(line.startswith("  module.lr: ") and line.endswith(" -> 0.01") for line in lines[lines.index("config:"):])
    assert "code:" in lines  # the dry run recorded no provenance: its commit and digest are absent


@pytest.mark.parametrize("args, message", [
    (["task=logs", "task.run={tmp}"], "task.run={tmp}: not a run dir"),
    (["task=cancel", "task.run=987654321"], "task.run=987654321: no run under "),
    (["task=diff", "task.a={tmp}", "task.b={tmp}"], "task.a={tmp}: not a run dir"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    result = primus(*[arg.format(tmp=tmp_path) for arg in args], cwd=tmp_path,
                    env={"PRIMUS_OUTPUT_ROOT": str(tmp_path)})
    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 1 and error_lines(result.stderr)[0].startswith(
        "error: " + message.format(tmp=tmp_path))
