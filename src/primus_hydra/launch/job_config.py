"""The prepared job handed from the orchestrator to its workers: composed, resolved and checked once, read by all.

`.primus/job_config.yaml` holds the job's config, the layout it was prepared for, where it runs, and its backend's
translated arguments (`translated`: what the trainer gets, after the build_args patches; a dry run writes this same
file). Workers never recompose (a second composition could resolve ${now:} or ${oc.env:} differently, hydra #2070),
never validate again and do not translate again: they load this file back into the typed schema and check only
that they run in the world it was prepared for, with the library the arguments were made for
(backends/translation.py).

No secret is written into it (mode 0600 all the same): a value read from the environment stays `${oc.env:...}`
and resolves in each worker from the environment it inherits from the orchestrator (forked from it, or exported
by sbatch on Slurm); a secret-named value typed as a literal travels the same way, as the variable
`PRIMUS_SECRET_<KEY PATH>` that the file names (config/secrets.py says which names are secret). Translated
arguments that hold a secret's value are left out: the workers translate them again.
"""
from __future__ import annotations

import dataclasses
import os
import re
import socket
import time
from pathlib import Path
from typing import Optional

from omegaconf import OmegaConf

from primus_hydra.backends.schemas import typed_config
from primus_hydra.backends.translation import Translation
from primus_hydra.config.layout import ParallelLayout
from primus_hydra.config.secrets import LeafPath, config_for_file, holds_any, secret_values
from primus_hydra.orchestrator.prepare import PreparedJob
from primus_hydra.util.private_files import write_private_text
from primus_hydra.util.yaml_text import dump_yaml, load_yaml

JOB_CONFIG_FILE = Path(".primus") / "job_config.yaml"
SECRET_VARIABLE_PREFIX = "PRIMUS_SECRET_"


def node_job_config_file(node_rank: int) -> Path:
    """The job config one node's agent hands its workers when the job spans nodes: each node planned its own
    share (threads, `auto` knobs), so each has its own file in the shared run dir."""
    return Path(".primus") / f"job_config.node{node_rank}.yaml"


def write_job_config(job: PreparedJob, run_dir: Path, name: Path = JOB_CONFIG_FILE) -> Path:
    target = Path(run_dir) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "prepared": {"layout": dataclasses.asdict(job.layout), "by": f"{socket.gethostname()}:{os.getpid()}",
                     "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                     "placement": job.placement.kind if job.placement is not None else None},
        "config": config_for_file(job.cfg, secret_value=hand_over_in_environment),
        "translated": shipped_translation(job),
    }
    header = (f"# prepared for world size {job.layout.world_size}: workers load this file and trust it "
              "(no recomposition, no second validation)\n")
    tmp = target.with_suffix(f".tmp.{os.getpid()}")  # written whole, then renamed: a reader never sees half
    write_private_text(tmp, header + dump_yaml(document, sort_keys=False))
    tmp.replace(target)
    return target


def hand_over_in_environment(path: LeafPath, value: object) -> str:
    """A literal secret goes to the workers in this process's environment, which they inherit; the job config
    holds the interpolation that reads it back (typed: a number stays a number)."""
    name = SECRET_VARIABLE_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", "_".join(path)).upper()
    os.environ[name] = str(value)
    return f"${{oc.env:{name}}}" if isinstance(value, str) else f"${{oc.decode:${{oc.env:{name}}}}}"


def shipped_translation(job: PreparedJob) -> Optional[dict]:
    """The translated arguments in their plain form, unless they hold a secret's value (the workers then translate
    them again from the config, which hands secrets over in the environment)."""
    if job.translation is None:
        return None
    plain = job.translation.plain()
    return None if holds_any(plain["arguments"], secret_values(job.cfg)) else plain


def load_job_config(path: Path) -> PreparedJob:
    document = load_yaml(Path(path).read_text())
    cfg = typed_config(OmegaConf.create(document["config"]))
    translated = document.get("translated")
    return PreparedJob(cfg=cfg, layout=ParallelLayout(**document["prepared"]["layout"]),
                       translation=Translation.from_plain(translated) if translated else None)

