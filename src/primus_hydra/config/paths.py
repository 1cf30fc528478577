"""Paths: where conf/ lives (inside the installed package, or at the root of a source checkout), the run dir Hydra
will make, whether a folder a run writes into can be written (checked before anything is created), and the user's
relative paths made absolute for a job that runs in its run dir (hydra.job.chdir=true), and the one checkpoint dir
every backend reads (module.checkpoint.dir, resolved when the job is prepared)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterator, Optional

from primus_hydra.errors import PrimusError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def find_conf_dir() -> str:
    packaged = _PACKAGE_DIR / "conf"  # a wheel ships conf/ as primus_hydra/conf
    if (packaged / "config.yaml").is_file():
        return str(packaged)
    checkout = _PACKAGE_DIR.parent.parent / "conf"  # <repo>/src/primus_hydra -> <repo>/conf
    if (checkout / "config.yaml").is_file():
        return str(checkout)
    raise FileNotFoundError(f"primus_hydra: no conf/config.yaml next to {_PACKAGE_DIR} (broken install?)")


class CheckoutConfFinder:
    """Imports `primus_hydra.conf` (Hydra's `initialize_config_module("primus_hydra.conf")`) from a source checkout
    whose src/ is on sys.path (PYTHONPATH=src, scripts/setup.sh's editable compat mode): there conf/ sits beside
    src/, not inside the package, and no other finder knows it. Last on sys.meta_path, so an installed package (a
    wheel's primus_hydra/conf, an editable install's mapping) always wins."""

    NAME = "primus_hydra.conf"

    @classmethod
    def find_spec(cls, name: str, path=None, target=None):
        init = _PACKAGE_DIR.parent.parent / "conf" / "__init__.py"
        if name != cls.NAME or not init.is_file():
            return None
        return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])

    @classmethod
    def install(cls) -> None:
        if cls not in sys.meta_path:
            sys.meta_path.append(cls)


def hydra_job_dir(config, *, sweep: bool) -> Path:
    """The directory Hydra's run_job will give this job (hydra.run.dir, or hydra.sweep.dir/subdir), absolute,
    resolved before Hydra makes it. A `${hydra:...}` interpolation in them reads HydraConfig: set for the moment
    (copying the hydra node, so only when one is there)."""
    from omegaconf import OmegaConf

    section = OmegaConf.to_container(config.hydra.sweep if sweep else config.hydra.run, resolve=False)
    reads_hydra = any("${hydra:" in str(value) for value in section.values())
    with hydra_node_read_from(config) if reads_hydra else contextlib.nullcontext():
        key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
        if not str(OmegaConf.select(config, key) or "").strip():  # Hydra would run in the current folder
            raise PrimusError(f"{key} is empty; give a folder (or unset it for the default)")
        if sweep:
            return Path(os.path.abspath(os.path.join(str(config.hydra.sweep.dir), str(config.hydra.sweep.subdir))))
        return Path(os.path.abspath(str(config.hydra.run.dir)))  # what Hydra records as hydra.runtime.output_dir


@contextlib.contextmanager
def hydra_node_read_from(config) -> Iterator[None]:
    """`${hydra:...}` reads `config`'s own hydra node in the block (HydraConfig.get() is config.hydra), and what was
    set before it afterwards. HydraConfig.set_config would copy the node (~2 ms) and make it read-only: resolving
    needs neither."""
    from hydra.core.hydra_config import HydraConfig

    hydra_config = HydraConfig.instance()
    previous = hydra_config.cfg
    hydra_config.cfg = config
    try:
        yield
    finally:
        hydra_config.cfg = previous


def writable_dir_failure(what: str, path, fix: str) -> Optional[str]:
    """One line when `path` cannot be the folder a run writes into: empty, a file, under something that is not a
    folder, or not writable (a read-only mount, or permissions). Nothing is created. `what` names it in the line
    (a key path, or "run dir"); `fix` says what to do."""
    text = str(path if path is not None else "").strip()
    if not text:
        return f"{what} is empty; {fix}"
    target = Path(text).expanduser().absolute()
    existing = target
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if existing == target and not target.is_dir():
        return f"{what}={text}: exists and is not a folder; {fix}"
    if not existing.is_dir():
        return f"{what}={text}: {existing} is not a folder, so nothing can be created under it; {fix}"
    if not os.access(existing, os.W_OK | os.X_OK):
        reason = "a read-only file system" if _read_only_mount(existing) else "no write permission"
        return f"{what}={text}: {existing} is not writable ({reason}); {fix}"
    pseudo = _pseudo_file_system(existing)
    if pseudo:  # root passes os.access there, but the kernel refuses to create folders
        return f"{what}={text}: {existing} is on the kernel's {pseudo} file system, where no folder can be made; {fix}"
    return None


# file systems the kernel fills itself: access() says yes to root, mkdir says no
PSEUDO_FILE_SYSTEMS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore",
                                 "bpf", "configfs", "efivarfs", "fusectl", "binfmt_misc", "devpts", "mqueue"})


def _pseudo_file_system(path: Path) -> Optional[str]:
    """The type of the pseudo file system holding `path` (from /proc/self/mounts), or None."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    resolved, best, kind = str(path.resolve()), "", None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind if kind in PSEUDO_FILE_SYSTEMS else None


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def output_root_failure(environ=os.environ) -> Optional[str]:
    """PRIMUS_OUTPUT_ROOT set but blank would put runs at the filesystem root (`/2026-12-01/...`)."""
    value = environ.get("PRIMUS_OUTPUT_ROOT")
    if value is not None and not value.strip():
        return ("PRIMUS_OUTPUT_ROOT is set but empty, which would put runs at the filesystem root; "
                "unset it or give it a folder")
    return None


def run_dir_failures(run_dir) -> list[str]:
    """The run dir (and so the output root or sweep dir above it) can hold the run's files."""
    fix = "set hydra.run.dir (hydra.sweep.dir with -m) or PRIMUS_OUTPUT_ROOT to a writable folder"
    return [line for line in (output_root_failure(), writable_dir_failure("run dir", run_dir, fix)) if line]


# the paths a user gives (a key that the selected backend or task lacks is skipped): with hydra.job.chdir=true the
# job runs in its run dir, so a relative one is made absolute against the folder the run was launched from
USER_PATH_KEYS = (
    "module.data.path", "module.data.tokenizer", "module.checkpoint.dir", "module.checkpoint.resume",
    "module.checkpoint.load",
    "backend.path", "backend.tokenizer_path",
    "task.runs", "task.source", "task.primus_root", "task.out", "task.shared_dir", "task.checkpoint_dir",
)
# a path or a Hugging Face Hub id ("meta-llama/Llama-3.1-8B"): a path only when the launch folder has it
PATH_OR_HUB_ID_KEYS = ("backend.tokenizer_model", "backend.model_name_or_path")
_NOT_A_PATH = ("auto",)  # module.checkpoint.resume=auto: the latest checkpoint in module.checkpoint.dir


def chdir_launch_dir(cfg) -> Optional[str]:
    """The folder the run was launched from (hydra.runtime.cwd) when its job will run in its run dir
    (hydra.job.chdir=true), else None. Read from cfg's `hydra` node, else from HydraConfig (a task preparing its
    own job inside Hydra's run_job)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    hydra_cfg = cfg.hydra if "hydra" in cfg else HydraConfig.get() if HydraConfig.initialized() else None
    if hydra_cfg is None or not OmegaConf.select(hydra_cfg, "job.chdir", default=False):
        return None
    return OmegaConf.select(hydra_cfg, "runtime.cwd", default=None) or None


def make_user_paths_absolute(job, launch_dir: str) -> None:
    """The relative paths of USER_PATH_KEYS (each path of a blend "w1 p1 w2 p2" of module.data.source=indexed)
    and those of PATH_OR_HUB_ID_KEYS that exist under launch_dir become launch_dir/<path>, in `job`, as
    hydra.utils.to_absolute_path makes them. Absolute paths, `~/...`, URLs and interpolations that give those
    stay as written."""
    from omegaconf import OmegaConf

    for key in USER_PATH_KEYS + PATH_OR_HUB_ID_KEYS:
        value = OmegaConf.select(job, key, default=None)
        if not isinstance(value, str) or not value.strip():
            continue
        blend = key == "module.data.path" and OmegaConf.select(job, "module.data.source") == "indexed"
        words = value.split() if blend else [value]
        absolute = [_absolute_against(word, launch_dir, must_exist=key in PATH_OR_HUB_ID_KEYS) for word in words]
        if absolute != words:
            OmegaConf.update(job, key, " ".join(absolute), merge=False)


def checkpoint_dir_of(cfg, run_dir) -> Optional[str]:
    """Where the run keeps its checkpoints: module.checkpoint.dir with `~` expanded, made absolute (against the
    launch folder: a job that runs in its run dir has it so already, make_user_paths_absolute), else
    <run_dir>/checkpoints; None while neither is known (a job prepared before its run dir is)."""
    configured = cfg.module.checkpoint.get("dir")
    if configured:
        return absolute_user_path(configured)
    return os.path.join(os.path.abspath(run_dir), "checkpoints") if run_dir is not None else None


def absolute_user_path(path) -> str:
    """A path the user gave, `~` expanded, made absolute against the current folder."""
    return os.path.abspath(os.path.expanduser(str(path)))


def resolve_checkpoint_dir(job, run_dir) -> None:
    """module.checkpoint.dir of the prepared job, written once as checkpoint_dir_of() finds it: what every backend's
    arguments, trainer and checks read."""
    from omegaconf import OmegaConf

    resolved = checkpoint_dir_of(job, run_dir)
    if resolved is not None and resolved != OmegaConf.select(job, "module.checkpoint.dir", default=None):
        OmegaConf.update(job, "module.checkpoint.dir", resolved, merge=False)


def _absolute_against(word: str, launch_dir: str, *, must_exist: bool) -> str:
    if word in _NOT_A_PATH or os.path.isabs(word) or word.startswith("~") or "://" in word or _is_number(word):
        return word
    path = os.path.normpath(os.path.join(launch_dir, word))
    return path if not must_exist or os.path.exists(path) else word


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
