"""A token exported as HF_TOKEN and handed to the job (`+platform.env.HUGGING_FACE_HUB_TOKEN=${oc.env:HF_TOKEN}`)
appears in no file of a real run's directory and nowhere on its console, in one process and in two, yet every rank
gets it; a secret typed on the command line is warned about and only Hydra's own records hold it; files that hold
config are owner-only."""
from __future__ import annotations

import hashlib
import stat
import subprocess
from pathlib import Path

import pytest

from helpers.cli import primus, run_dirs
from helpers.overrides import NO_CHECKPOINTS, QUIET_LOGS

pytestmark = pytest.mark.slow  # every test here trains or runs real processes for seconds

TOKEN = "hf_integration_test_token_5f3a9c"
LITERAL = "wandb-literal-key-77e1"
TINY = ["model=llama_tiny", "module.train_iters=2", "module.warmup_iters=0", "module.seq_length=16",
        "module.micro_batch_size=1", "module.global_batch_size=2", *QUIET_LOGS, *NO_CHECKPOINTS,
        "platform.peak_tflops_per_device=1.0"]
SECRETS = ["+platform.env.HUGGING_FACE_HUB_TOKEN=${oc.env:HF_TOKEN}", f"+platform.env.WANDB_API_KEY={LITERAL}"]
HYDRA_RECORDS = {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml"}
# a user patch module (patches.modules) that records, in each rank, digests of the two variables the job set
PROBE = """
import hashlib, os
from primus_hydra.patches import register_patch

@register_patch("test.secret_probe", phase="setup", backend="torch")
def probe(ctx):
    digests = [hashlib.sha256(os.environ[name].encode()).hexdigest() for name in ("HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")]
    (ctx.run_dir / f"probe_rank{os.environ.get('RANK', '0')}.txt").write_text(" ".join(digests))
"""


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class Run:
    def __init__(self, result: subprocess.CompletedProcess, run_dir: Path, processes: int):
        self.processes = processes
        self.console = result.stdout + result.stderr
        self.run_dir = run_dir
        self.files = {str(path.relative_to(run_dir)): path for path in run_dir.rglob("*") if path.is_file()}

    def files_holding(self, text: str) -> set[str]:
        return {name for name, path in self.files.items() if text.encode() in path.read_bytes()}


@pytest.fixture(scope="module", params=[1, 2], ids=["1_process", "2_processes"])
def run(request, tmp_path_factory) -> Run:
    cwd = tmp_path_factory.mktemp(f"secrets_{request.param}")
    (cwd / "secret_probe.py").write_text(PROBE)
    result = primus(*TINY, f"launch.nproc_per_node={request.param}", *SECRETS, "patches.modules=[secret_probe]", cwd=cwd,
                    env={"HF_TOKEN": TOKEN, "PYTHONPATH": str(cwd)})
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = run_dirs(cwd)
    return Run(result, run_dir, request.param)


def test_the_exported_token_is_in_no_file_and_not_on_the_console(run):
    assert run.files_holding(TOKEN) == set()
    assert TOKEN not in run.console


def test_every_rank_gets_both_secrets(run):
    ranks = sorted(name for name in run.files if name.startswith("probe_rank"))
    assert ranks == [f"probe_rank{rank}.txt" for rank in range(run.processes)]
    assert {run.files[name].read_text() for name in ranks} == {f"{digest(TOKEN)} {digest(LITERAL)}"}


def test_the_env_block_is_logged_with_secrets_redacted(run):
    line = "env set: HUGGING_FACE_HUB_TOKEN=<redacted>, TOKENIZERS_PARALLELISM=false, WANDB_API_KEY=<redacted>"
    assert line in run.console and line in (run.run_dir / "logs" / "rank_0.log").read_text()


def test_a_secret_typed_on_the_command_line_is_warned_about_and_only_in_hydras_records(run):
    assert run.console.count("warning: platform.env.WANDB_API_KEY is a secret typed on the command line") == 1
    assert LITERAL not in run.console
    assert run.files_holding(LITERAL) == HYDRA_RECORDS


def test_every_file_that_holds_config_is_owner_only(run):
    config_files = HYDRA_RECORDS | {"config_resolved.yaml"} | {name for name in run.files if name.startswith(".primus/")}
    assert {name: oct(stat.S_IMODE(run.files[name].stat().st_mode)) for name in config_files} == {
        name: oct(0o600) for name in config_files}


@pytest.mark.parametrize("flags", [["--cfg", "job"], ["--cfg=job"]])  # both of argparse's spellings
def test_a_printed_resolved_config_shows_secrets_redacted(tmp_path, flags):
    result = primus(*SECRETS, *flags, "--resolve", "-p", "platform.env", cwd=tmp_path, env={"HF_TOKEN": TOKEN})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["# @package platform.env", "TOKENIZERS_PARALLELISM: 'false'",
                                          "HUGGING_FACE_HUB_TOKEN: <redacted>", "WANDB_API_KEY: <redacted>"]
