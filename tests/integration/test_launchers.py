"""launchers/: direct.sh, slurm.sh and container.sh driven as a user would, through subprocess.

No scheduler and no container engine run here: Slurm is a faked environment plus fake `srun`/`sbatch`/`scontrol`
on PATH, and the container engines are checked through the command lines container.sh generates."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LAUNCHERS = REPO / "launchers"
DIRECT, SLURM, CONTAINER = (str(LAUNCHERS / name) for name in ("direct.sh", "slurm.sh", "container.sh"))
DEFAULT_PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else "python3"

# Words a shell would otherwise expand, split, run or glob; each must reach python exactly as written.
HOSTILE = ["a b", "it's", 'say "hi"', "$(touch pwned1)", "`touch pwned2`", "x; touch pwned3", "a && b | c > d",
           "line1\nline2", "*", "?[a]", "~", "$HOME", "back\\slash", "tab\there", "", "--help", "--dry-run", "-m"]

# Python that only reports what it was given: its argv (after `-m primus_hydra`) and a few variables.
ARGV_REPORTER = f"""#!{sys.executable}
import json, os, sys
print(json.dumps({{"argv": sys.argv[1:], "env": {{k: v for k, v in os.environ.items()
    if k.startswith(("NCCL_", "GLOO_", "RCCL_", "SLURM_", "PRIMUS_", "GPUS_"))}}, "stdin": ""}}))
"""


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """A PATH entry for fake tools; its `scontrol` fails, so the built-in nodelist parser answers."""
    path = tmp_path / "bin"
    path.mkdir()
    write_tool(path, "scontrol", "#!/bin/sh\nexit 1\n")
    return path


def write_tool(folder: Path, name: str, text: str) -> Path:
    tool = folder / name
    tool.write_text(text)
    tool.chmod(0o755)
    return tool


def clean_env(fake_bin: Path, **extra: str) -> dict[str, str]:
    """This process's environment without anything a launcher reads, plus `extra`."""
    prefixes = ("SLURM_", "NCCL_", "RCCL_", "GLOO_", "PRIMUS_", "HF_", "APPTAINER")
    names = {"MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "GPUS_PER_NODE", "PYTHON", "CONTAINER_ENGINE"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k not in names}
    env["PATH"] = f"{fake_bin}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def run(script: str, *args: str, env: dict[str, str], cwd: Path | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", script, *args], env=env, cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=120)


def shell_words(line: str) -> list[str]:
    """What a shell makes of one printed (shell-quoted) command line."""
    out = subprocess.run(["bash", "-c", 'eval "words=($1)"; printf "%s\\0" "${words[@]}"', "_", line],
                         capture_output=True, text=True, check=True).stdout
    return out.split("\0")[:-1]


def dry_run_command(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr
    return shell_words(result.stdout.rstrip("\n").splitlines()[-1])


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


SLURM_NODE_2_OF_3 = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "3", "SLURM_NODEID": "2", "SLURM_PROCID": "2",
                     "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu-a[01-02],gpu-b7"}


# --- the nodelist -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nodelist, hosts", [
    ("n1", ["n1"]),
    ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
    ("gpu-a[01-02],gpu-b7", ["gpu-a01", "gpu-a02", "gpu-b7"]),
    ("node[08-10]", ["node08", "node09", "node10"]),
    ("n[9-11]", ["n9", "n10", "n11"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a,b[3],c-[9-10].ib", ["a", "b3", "c-9.ib", "c-10.ib"]),
])
def test_nodelist_expands_like_scontrol_show_hostnames(nodelist, hosts):
    result = subprocess.run(["bash", "-c", 'source "$1" && expand_nodelist "$2"', "_", str(LAUNCHERS / "_common.sh"),
                             nodelist], capture_output=True, text=True)
    assert (result.returncode, result.stdout.splitlines()) == (0, hosts), result.stderr


@pytest.mark.parametrize("nodelist", ["n[1-", "n1]", "n[a-b]", "n[3-1]", "n[]", "a,,b"])
def test_malformed_nodelist_is_one_error_line(nodelist):
    result = subprocess.run(["bash", "-c", 'source "$1" && expand_nodelist "$2"', "_", str(LAUNCHERS / "_common.sh"),
                             nodelist], capture_output=True, text=True)
    assert one_error_line(result).startswith(f"error: cannot parse Slurm nodelist '{nodelist}'")


# --- direct.sh: who this node is ----------------------------------------------------------------------------

def test_slurm_variables_become_launch_overrides(fake_bin):
    env = clean_env(fake_bin, **SLURM_NODE_2_OF_3, PRIMUS_RUN_DIR="/shared/run")
    result = run(DIRECT, "--dry-run", "model=llama_tiny", env=env)
    assert dry_run_command(result) == [
        DEFAULT_PYTHON, "-m", "primus_hydra", "launch.nnodes=3", "launch.node_rank=2", "launch.master_addr=gpu-a01",
        "launch.master_port=24242", "hydra.run.dir=/shared/run", "model=llama_tiny"]
    # the one-per-node task is the node's orchestrator, not a rank: primus_hydra must not see the srun rank
    assert "unset SLURM_PROCID SLURM_STEP_ID" in result.stdout.splitlines()


def test_several_slurm_nodes_share_a_run_dir_named_after_the_job_step(fake_bin):
    env = clean_env(fake_bin, **{**SLURM_NODE_2_OF_3, "SLURM_STEP_ID": "3"}, PRIMUS_OUTPUT_ROOT="/out")
    (run_dir,) = [w for w in dry_run_command(run(DIRECT, "--dry-run", env=env)) if w.startswith("hydra.run.dir=")]
    assert re.fullmatch(r"hydra\.run\.dir=/out/\d{4}-\d\d-\d\d/slurm-4242\.3", run_dir)


def test_a_run_dir_of_the_user_is_kept(fake_bin):
    env = clean_env(fake_bin, **SLURM_NODE_2_OF_3, PRIMUS_RUN_DIR="/shared/run")
    command = dry_run_command(run(DIRECT, "--dry-run", "hydra.run.dir=/mine", env=env))
    assert [w for w in command if w.startswith("hydra.run.dir=")] == ["hydra.run.dir=/mine"]


def test_scontrol_answers_first_when_it_works(fake_bin):
    write_tool(fake_bin, "scontrol", '#!/bin/sh\n[ "$1 $2 $3" = "show hostnames gpu-a[01-02],gpu-b7" ] || exit 1\n'
                                     'printf "head07\\nhead08\\n"\n')
    command = dry_run_command(run(DIRECT, "--dry-run", env=clean_env(fake_bin, **SLURM_NODE_2_OF_3)))
    assert "launch.master_addr=head07" in command


def test_exported_values_win_over_slurm(fake_bin):
    env = clean_env(fake_bin, **SLURM_NODE_2_OF_3, NNODES="2", NODE_RANK="1", MASTER_PORT="29400",
                    MASTER_ADDR="gpu-a01.cluster.local", GPUS_PER_NODE="8")
    command = dry_run_command(run(DIRECT, "--dry-run", env=env))
    assert command[3:8] == ["launch.nnodes=2", "launch.node_rank=1", "launch.master_addr=gpu-a01.cluster.local",
                            "launch.master_port=29400", "launch.nproc_per_node=8"]


def test_without_slurm_nothing_is_added(fake_bin):
    command = dry_run_command(run(DIRECT, "--dry-run", "--cfg", "job", env=clean_env(fake_bin)))
    assert command == [DEFAULT_PYTHON, "-m", "primus_hydra", "--cfg", "job"]


def test_python_is_selectable(fake_bin):
    assert dry_run_command(run(DIRECT, "--dry-run", env=clean_env(fake_bin, PYTHON="/opt/py")))[0] == "/opt/py"
    assert dry_run_command(run(DIRECT, "--python", "/x/py", "--dry-run", env=clean_env(fake_bin)))[0] == "/x/py"


def test_master_addr_of_another_host_fails_fast_without_starting_python(fake_bin, tmp_path):
    marker = tmp_path / "python_started"
    python = write_tool(tmp_path, "py", f"#!/bin/sh\ntouch {marker}\n")
    env = clean_env(fake_bin, **SLURM_NODE_2_OF_3, MASTER_ADDR="gpu-b7", PYTHON=str(python))
    assert one_error_line(run(DIRECT, "model=llama_tiny", env=env)) == (
        "error: MASTER_ADDR=gpu-b7 is not the first node of this Slurm job (gpu-a01 of gpu-a[01-02],gpu-b7): every "
        "node must rendezvous at the same host; unset MASTER_ADDR or set it to gpu-a01")
    assert not marker.exists()


@pytest.mark.parametrize("variables, message", [
    ({"NNODES": "2", "NODE_RANK": "2"}, "error: NODE_RANK=2 is not below NNODES=2"),
    ({"NNODES": "zero"}, "error: NNODES=zero: expected a positive integer"),
    ({"MASTER_PORT": "70000"}, "error: MASTER_PORT=70000: expected a port number 1-65535"),
    ({**SLURM_NODE_2_OF_3, "SLURM_STEP_NUM_TASKS": "24", "SLURM_STEP_NUM_NODES": "3"},
     "error: srun step has 24 tasks on 3 nodes"),
])
def test_inconsistent_job_variables_are_one_error_line(fake_bin, variables, message):
    assert one_error_line(run(DIRECT, "--dry-run", env=clean_env(fake_bin, **variables))).startswith(message)


def test_bad_direct_option_value_is_one_error_line(fake_bin):
    assert one_error_line(run(DIRECT, "--env", "1X=2", env=clean_env(fake_bin))) == (
        "error: --env '1X=2': expected NAME=VALUE with NAME a shell variable name")
    assert one_error_line(run(DIRECT, "--python", env=clean_env(fake_bin))) == "error: --python needs a value (see --help)"


# --- direct.sh: environment and arguments --------------------------------------------------------------------

def test_interface_variables_from_flags_env_and_files(fake_bin, tmp_path):
    python = write_tool(tmp_path, "py", ARGV_REPORTER)
    env_file = tmp_path / "platform.env"
    env_file.write_text("NCCL_IB_GID_INDEX=3\nNCCL_DEBUG=WARN\n")
    env = clean_env(fake_bin, PYTHON=str(python), RCCL_MSCCL_ENABLE="0", NCCL_DEBUG="INFO")
    result = run(DIRECT, "--env-file", str(env_file), "--socket-ifname", "ib0", "--ib-hca", "mlx5_0,mlx5_1",
                 "--env", "NCCL_DEBUG=TRACE", "x=1", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"argv": ["-m", "primus_hydra", "x=1"], "stdin": "", "env": {
        "NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "NCCL_IB_GID_INDEX": "3", "NCCL_DEBUG": "TRACE", "RCCL_MSCCL_ENABLE": "0"}}


def test_dry_run_prints_the_environment_it_would_run_with(fake_bin):
    env = clean_env(fake_bin, NCCL_IB_HCA="mlx5_0", HF_TOKEN="secret", UNRELATED="x")
    result = run(DIRECT, "--dry-run", "--socket-ifname", "eth 0", env=env)
    assert result.stdout.splitlines()[:-1] == [
        "# environment (set by direct.sh, or passed through from yours)",
        "export GLOO_SOCKET_IFNAME=eth\\ 0", "# HF_TOKEN is set (value hidden)", "export NCCL_IB_HCA=mlx5_0",
        "export NCCL_SOCKET_IFNAME=eth\\ 0", "# command"]


def test_hostile_arguments_reach_python_unchanged(fake_bin, tmp_path):
    python = write_tool(tmp_path, "py", ARGV_REPORTER)
    env = clean_env(fake_bin, PYTHON=str(python))
    result = run(DIRECT, "--", *HOSTILE, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["argv"] == ["-m", "primus_hydra", *HOSTILE]
    assert dry_run_command(run(DIRECT, "--dry-run", "--", *HOSTILE, env=env, cwd=tmp_path))[1:] == [
        "-m", "primus_hydra", *HOSTILE]
    assert not list(tmp_path.glob("pwned*"))


def test_hostile_values_survive_into_the_composed_config(fake_bin, tmp_path):
    value = "a b; $(touch pwned) `touch pwned` * ? [x] 'q' & | > < \\ ~ #c \n second line"
    result = run(DIRECT, "--cfg", "job", "-p", "platform", f'platform.name="{value}"', env=clean_env(fake_bin),
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["name"] == value
    assert not list(tmp_path.glob("pwned*"))


def test_direct_trains_the_tiny_model_for_two_steps(fake_bin, tmp_path):
    env = clean_env(fake_bin, PRIMUS_OUTPUT_ROOT=str(tmp_path / "out"))
    result = run(DIRECT, "module.train_iters=2", "module.warmup_iters=0", "module.log.plot=false",
                 "module.log.tensorboard=false", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (metrics,) = (tmp_path / "out").glob("*/*/metrics.jsonl")
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2]


# --- slurm.sh --------------------------------------------------------------------------------------------------

SBATCH_OPTIONS = ["-N", "2", "-p", "mi300x", "-t", "02:00:00", "-A", "proj", "-q", "high", "-G", "8", "-c", "64",
                  "-J", "llama", "-o", "logs/%x-%j.out", "--sbatch-arg", "--exclusive", "--srun-arg=--mpi=none",
                  "--env", "NCCL_DEBUG=INFO"]


def test_sbatch_script_is_generated(fake_bin):
    result = run(SLURM, *SBATCH_OPTIONS, "--dry-run", "--", "model=llama3_8b", "platform.name='a b'",
                 env=clean_env(fake_bin))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"""\
# sbatch --parsable --exclusive <<'SCRIPT'
#!/bin/bash
#SBATCH --job-name=llama
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --partition=mi300x
#SBATCH --time=02:00:00
#SBATCH --account=proj
#SBATCH --qos=high
#SBATCH --gpus-per-node=8
#SBATCH --output=logs/%x-%j.out
#SBATCH --cpus-per-task=64
# generated by launchers/slurm.sh: one task per node, each runs direct.sh (which starts the node's workers)
set -euo pipefail
export GPUS_PER_NODE=8
export PRIMUS_RUN_DIR="${{PRIMUS_RUN_DIR:-${{PRIMUS_OUTPUT_ROOT:-outputs}}/$(date +%Y-%m-%d)/slurm-${{SLURM_JOB_ID}}}}"
srun --kill-on-bad-exit=1 --cpus-per-task=64 --mpi=none {DIRECT} --env NCCL_DEBUG=INFO -- model=llama3_8b platform.name=\\'a\\ b\\'
# SCRIPT
"""


def test_batch_script_hands_hostile_arguments_to_direct_unchanged(fake_bin, tmp_path):
    script = run(SLURM, "-N", "2", "--dry-run", "--", *HOSTILE, env=clean_env(fake_bin)).stdout
    write_tool(fake_bin, "srun", ARGV_REPORTER)
    result = subprocess.run(["bash", "-c", script], env=clean_env(fake_bin, SLURM_JOB_ID="77"), cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == ["--kill-on-bad-exit=1", DIRECT, "--", *HOSTILE]
    assert re.fullmatch(r"outputs/\d{4}-\d\d-\d\d/slurm-77", report["env"]["PRIMUS_RUN_DIR"])
    assert not list(tmp_path.glob("pwned*"))


def test_submission_sends_the_script_to_sbatch_on_stdin(fake_bin, tmp_path):
    write_tool(fake_bin, "sbatch", f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\ncat > {tmp_path}/script\n'
                                   'echo "9876;cluster"\n')
    env = clean_env(fake_bin)
    result = run(SLURM, "-N", "2", "--sbatch-arg", "--exclusive", "--", "x=1", env=env)
    assert (result.returncode, result.stdout) == (0, "submitted job 9876: primus-hydra on 2 node(s)\n"), result.stderr
    assert (tmp_path / "args").read_text() == "--parsable\n--exclusive\n"
    dry = run(SLURM, "-N", "2", "--sbatch-arg", "--exclusive", "--dry-run", "--", "x=1", env=env).stdout
    assert (tmp_path / "script").read_text() == "".join(dry.splitlines(keepends=True)[1:-1])


def test_inside_an_allocation_srun_runs_at_once(fake_bin):
    write_tool(fake_bin, "srun", ARGV_REPORTER)
    result = run(SLURM, "-G", "4", "--", "a b", env=clean_env(fake_bin, SLURM_JOB_ID="5", SLURM_JOB_NUM_NODES="3"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == ["--job-name=primus-hydra", "--nodes=3", "--ntasks-per-node=1", "--gpus-per-node=4",
                              "--kill-on-bad-exit=1", DIRECT, "--", "a b"]
    assert report["env"]["GPUS_PER_NODE"] == "4"


def test_srun_flag_prints_the_srun_command(fake_bin):
    result = run(SLURM, "--srun", "-N", "2", "-p", "gpu", "--dry-run", "--", "a b", env=clean_env(fake_bin))
    assert dry_run_command(result) == ["srun", "--job-name=primus-hydra", "--nodes=2", "--ntasks-per-node=1",
                                       "--partition=gpu", "--kill-on-bad-exit=1", DIRECT, "--", "a b"]


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "error: unknown option '--bogus'; primus_hydra's arguments go after '--' (see --help)"),
    (["-N", "0"], "error: --nodes 0: expected a positive integer"),
    (["-N"], "error: -N needs a value (see --help)"),
])
def test_slurm_usage_errors_are_one_line(fake_bin, args, message):
    assert one_error_line(run(SLURM, "--dry-run", *args, env=clean_env(fake_bin))) == message


# --- container.sh ----------------------------------------------------------------------------------------------

CONTAINER_ARGS = ["--image", "rocm/primus:v26.5", "-v", "/data:/data:ro", "-e", "FOO=1 2", "-e", "BAR", "--dry-run",
                  "--", "--socket-ifname", "ib0", "model=llama3_8b", "platform.name='a b'"]
INNER = ["bash", f"{REPO}/launchers/direct.sh", "--socket-ifname", "ib0", "model=llama3_8b", "platform.name='a b'"]


def container_env(fake_bin):
    return clean_env(fake_bin, NCCL_DEBUG="INFO", HF_TOKEN="secret", SLURM_NODEID="1", MASTER_ADDR="n1",
                     UNRELATED="x", BAR="bar")


def test_docker_command_line_for_amd_gpus(fake_bin, tmp_path):
    result = run(CONTAINER, "--engine", "docker", "--gpu", "amd", *CONTAINER_ARGS, env=container_env(fake_bin),
                 cwd=tmp_path)
    infiniband = ["--device=/dev/infiniband"] if Path("/dev/infiniband").exists() else []
    assert dry_run_command(result) == [
        "docker", "run", "--rm", "--init", "--ipc=host", "--network=host", "--device=/dev/kfd", "--device=/dev/dri",
        "--group-add", "video", "--security-opt", "seccomp=unconfined", *infiniband, "-v", f"{REPO}:{REPO}",
        "-v", "/data:/data:ro", "-w", str(REPO), "-e", "PYTHON=python3", "-e", f"PYTHONPATH={REPO}/src",
        "-e", "FOO=1 2", "-e", "HF_TOKEN", "-e", "MASTER_ADDR", "-e", "NCCL_DEBUG", "-e", "SLURM_NODEID", "-e", "BAR",
        "rocm/primus:v26.5", *INNER]
    assert "secret" not in result.stdout


def test_podman_command_line_for_nvidia_gpus(fake_bin, tmp_path):
    result = run(CONTAINER, "--engine", "podman", "--gpu", "nvidia", "--name", "job 1", "--no-repo-mount",
                 *CONTAINER_ARGS, env=container_env(fake_bin), cwd=tmp_path)
    assert dry_run_command(result) == [
        "podman", "run", "--rm", "--init", "--ipc=host", "--network=host", "--name", "job 1",
        "--device", "nvidia.com/gpu=all", "-v", "/data:/data:ro", "-w", str(REPO), "-e", "PYTHON=python3",
        "-e", f"PYTHONPATH={REPO}/src", "-e", "FOO=1 2", "-e", "HF_TOKEN", "-e", "MASTER_ADDR", "-e", "NCCL_DEBUG",
        "-e", "SLURM_NODEID", "-e", "BAR", "rocm/primus:v26.5", *INNER]


@pytest.mark.parametrize("gpu, flags", [("amd", ["--rocm"]), ("nvidia", ["--nv"]), ("none", [])])
def test_apptainer_command_line(fake_bin, gpu, flags):
    result = run(CONTAINER, "--engine", "apptainer", "--gpu", gpu, "--engine-arg", "--writable-tmpfs",
                 *CONTAINER_ARGS, env=container_env(fake_bin), cwd=REPO / "docs")
    assert dry_run_command(result) == [
        "apptainer", "exec", *flags, "--bind", f"{REPO}:{REPO}", "--bind", "/data:/data:ro", "--pwd", str(REPO / "docs"),
        "--env", "PYTHON=python3", "--env", f"PYTHONPATH={REPO}/src", "--env", "FOO=1 2", "--writable-tmpfs",
        "rocm/primus:v26.5", *INNER]


def test_container_runs_the_command_it_prints_with_arguments_unchanged(fake_bin, tmp_path):
    write_tool(fake_bin, "docker", ARGV_REPORTER)
    env = clean_env(fake_bin, PRIMUS_IMAGE="img")
    args = ["--engine", "docker", "--gpu", "none", "--", "--", *HOSTILE]
    result = run(CONTAINER, *args, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ["docker", *json.loads(result.stdout)["argv"]] == dry_run_command(
        run(CONTAINER, "--dry-run", *args, env=env, cwd=tmp_path))
    assert json.loads(result.stdout)["argv"][-len(HOSTILE) - 1:] == ["--", *HOSTILE]
    assert not list(tmp_path.glob("pwned*"))


@pytest.mark.parametrize("args, message", [
    (["--engine", "docker"], "error: no image: pass --image IMAGE or set PRIMUS_IMAGE"),
    (["--engine", "lxc", "--image", "i"], "error: --engine lxc: expected docker, podman or apptainer"),
    (["--engine", "docker", "--image", "i", "--gpu", "intel"], "error: --gpu intel: expected amd, nvidia or none"),
    (["--engine", "docker", "--image", "i", "-v", "/data"], "error: --mount /data: expected SRC:DST[:options]"),
    (["--engine", "docker", "model=x"],
     "error: unknown option 'model=x'; direct.sh's options and primus_hydra's arguments go after '--' (see --help)"),
])
def test_container_usage_errors_are_one_line(fake_bin, args, message):
    assert one_error_line(run(CONTAINER, "--dry-run", *args, env=clean_env(fake_bin))) == message


@pytest.mark.parametrize("script", [DIRECT, SLURM, CONTAINER])
def test_help_is_printed(fake_bin, script):
    result = run(script, "--help", env=clean_env(fake_bin))
    assert result.returncode == 0 and result.stdout.startswith("usage: launchers/")
