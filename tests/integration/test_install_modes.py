"""Every way of installing the project gives Hydra the primus launchers and conf/, in a fresh venv, far from the checkout.

The modes: a built wheel, PEP 660 editable (setuptools' default, "lenient"), editable strict and editable compat
(scripts/setup.sh). Hydra finds launchers by walking `hydra_plugins.__path__` with pkgutil, and each mode puts
src/hydra_plugins there differently (site-packages, a path entry from an import finder, a link tree, src/ on
sys.path); a plain `pip install -e .` once lost both launchers (see setup.py).

Each venv holds only the base dependencies (no torch: composing needs only Hydra, and a plugin that imported torch
would fail Hydra's scan there). They are installed from a wheelhouse built once, with --no-index, so one mode
costs a few seconds; the project is installed from a copy of the checkout, so editable builds (build/,
*.egg-info) never write into the working tree.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints.txt"
LAUNCHERS = {
    "primus_local": "hydra_plugins.primus_local_launcher.primus_local_launcher.PrimusLocalLauncher",
    "primus_slurm": "hydra_plugins.primus_slurm_launcher.primus_slurm_launcher.PrimusSlurmLauncher",
}
# what pip is given to install the project, per mode; {source} is the checkout's copy, {wheel} its built wheel
MODES = {
    "wheel": ["{wheel}"],
    "editable": ["-e", "{source}"],
    "editable-strict": ["--config-settings", "editable_mode=strict", "-e", "{source}"],
    "editable-compat": ["--config-settings", "editable_mode=compat", "-e", "{source}"],
}
_TOP_LEVEL_LEFT_OUT = {".git", ".venv", "build", "dist", "outputs", "multirun", ".pytest_cache"}  # see .gitignore


def _pip(python: Path | str, *args: str, timeout: int = 300) -> None:
    """This venv's pip (>= 22.3) working on `python`'s environment: the mode venvs are made without pip (faster)."""
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args],
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"pip {' '.join(args)}\n{result.stdout}\n{result.stderr}"


def _clean_env() -> dict[str, str]:
    """The environment minus anything that could put the checkout on the mode venv's sys.path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the checkout without build products (editable installs write build/ and *.egg-info into it)."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        top = Path(directory).resolve() == REPO
        return {n for n in names if (top and n in _TOP_LEVEL_LEFT_OUT) or n == "__pycache__" or n.endswith((".egg-info", ".pyc"))}

    copy = tmp_path_factory.mktemp("source") / "primus-hydra"
    shutil.copytree(REPO, copy, ignore=ignore, symlinks=True)
    return copy


@pytest.fixture(scope="module")
def wheelhouse(source, tmp_path_factory) -> Path:
    """The project's wheel (an isolated build, as `pip install .` makes it), its base dependencies, and the build
    backend the editable installs use in their isolated builds."""
    house = tmp_path_factory.mktemp("wheelhouse")
    _pip(sys.executable, "wheel", "-q", "-c", str(CONSTRAINTS), "-w", str(house), str(source), "setuptools>=64", "wheel")
    return house


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_hydra_finds_the_launchers_and_conf(mode, source, wheelhouse, tmp_path):
    (wheel,) = wheelhouse.glob("primus_hydra-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    target = [arg.format(source=source, wheel=wheel) for arg in MODES[mode]]
    _pip(python, "install", "-q", "--no-index", "--find-links", str(wheelhouse), "-c", str(CONSTRAINTS), *target)

    workdir = tmp_path / "elsewhere"  # far from the checkout: only the installed project can provide plugins and conf/
    workdir.mkdir()

    def run(*args: str):
        result = subprocess.run([str(python), *args], capture_output=True, text=True, cwd=workdir, env=_clean_env(), timeout=120)
        assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"
        return result

    # the mode is the one named: the plugin's code comes from the venv (wheel) or from the source copy (editable)
    where = Path(run("-c", "import hydra_plugins.primus_local_launcher as m; print(m.__file__)").stdout.strip())
    assert where.is_relative_to(env_dir if mode == "wheel" else source), where

    # Hydra's plugin scan (pkgutil over hydra_plugins.__path__) finds both launchers, and imports them cleanly
    info = run("-m", "primus_hydra", "--info", "plugins")
    for target_path in LAUNCHERS.values():
        assert target_path.rsplit(".", 1)[1] in info.stdout, info.stdout
    assert "Error importing" not in info.stdout + info.stderr, info.stderr

    # ... and their ConfigStore entries exist: the launcher groups compose
    for name, target_path in LAUNCHERS.items():
        launcher = run("-m", "primus_hydra", f"hydra/launcher={name}", "--cfg", "hydra", "-p", "hydra.launcher")
        assert f"_target_: {target_path}" in launcher.stdout, launcher.stdout

    # conf/ comes with every mode (inside the wheel as primus_hydra/conf; the checkout's conf/ when editable)
    result = subprocess.run([str(env_dir / "bin" / "primus-hydra"), "backend=megatron", "model=llama3_8b", "--cfg", "job"],
                            capture_output=True, text=True, cwd=workdir, env=_clean_env(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "num_kv_heads: 8" in result.stdout and "name: megatron" in result.stdout
    run("-m", "primus_hydra", "experiment=llama3_8b_pretrain_megatron", "--cfg", "job", "-p", "backend")

    # ... and as the package primus_hydra.conf: the Python API, and Hydra's Compose API with the schemas registered
    api = run("-c", "import primus_hydra\n"
                    "from hydra import compose, initialize_config_module\n"
                    "print(primus_hydra.compose(['backend=megatron']).backend.name)\n"
                    "from primus_hydra.config import kept_nodes\n"
                    "from primus_hydra.config.run_composition import OWN_CONF_MODULE, compose_run_config\n"
                    "versions = [kept_nodes._kept_file()['hydra']['fingerprint'][name] == "
                    "kept_nodes.fingerprint([], {})[name] for name in ('python', 'hydra', 'omegaconf')]\n"
                    "print((compose_run_config(OWN_CONF_MODULE, 'config', [], job_name='primus') is not None) "
                    "== all(versions))\n"
                    "with initialize_config_module('primus_hydra.conf', version_base='1.3'):\n"
                    "    print(compose('config', overrides=['model=llama3_8b']).model.num_kv_heads)")
    # the installed project's kept `hydra` nodes are used (shipped, made from the same sources) where they were made
    # with its Hydra, OmegaConf and Python
    assert api.stdout.split() == ["megatron", "True", "8"], api.stdout

    has_torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True, cwd=workdir,
                               env=_clean_env(), timeout=60).returncode == 0
    assert not has_torch  # composing needs only hydra: torch is the [torch] extra

    # training without the [torch] extra: one line naming it, before anything is written
    result = subprocess.run([str(python), "-m", "primus_hydra"], capture_output=True, text=True, cwd=workdir,
                            env=_clean_env(), timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: backend=torch needs torch, numpy, which cannot be found. Install the torch extra: pip install "
        "'primus-hydra[torch]' (pin torch to your CUDA/ROCm/CPU build)."]
    assert not (workdir / "outputs").exists()


@pytest.mark.slow
def test_the_wheel_ships_conf_as_the_package_primus_hydra_conf(wheelhouse):
    (wheel,) = wheelhouse.glob("primus_hydra-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {name for name in names if name.startswith("primus_hydra/conf/")}
    expected = {f"primus_hydra/conf/{path.relative_to(REPO / 'conf').as_posix()}"
                for path in (REPO / "conf").rglob("*") if path.suffix in (".yaml", ".py")}
    assert shipped == expected
