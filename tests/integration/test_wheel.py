"""The installed-wheel smoke test: conf/ ships inside the wheel, so a fresh venv composes and prints configs."""
from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints.txt"


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_prints_the_composed_config(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("primus_hydra-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), str(wheel)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    workdir = tmp_path / "elsewhere"  # far from the checkout: only the installed package can provide conf/
    workdir.mkdir()
    result = subprocess.run([str(env_dir / "bin" / "primus-hydra"), "backend=megatron", "model=llama3_8b", "--cfg", "job"],
                            capture_output=True, text=True, cwd=workdir, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "num_kv_heads: 8" in result.stdout and "name: megatron" in result.stdout
    experiments = subprocess.run([str(python), "-m", "primus_hydra", "experiment=llama3_8b_pretrain_megatron", "--cfg", "job", "-p", "backend"],
                                 capture_output=True, text=True, cwd=workdir, timeout=120)
    assert experiments.returncode == 0, experiments.stderr
    has_torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True, timeout=60).returncode == 0
    assert not has_torch  # composing needs only hydra: torch is the [torch] extra
