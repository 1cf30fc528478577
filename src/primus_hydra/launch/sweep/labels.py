"""How a sweep point is named in progress lines, errors and summaries: by what tells it apart from the other points.

A point's overrides are the sweep's command line with one value picked per swept key (or, from a sweeper such as
Optuna or `hydra.sweeper.params`, extra overrides the command line never had), re-written by the sweeper
(`false` becomes `False`). The label keeps only those: not the keys the command line gave one value, which every
point shares. Values are shown as typed (Hydra's
escapes such as `\\:` dropped), and a label never runs past LABEL_WIDTH characters.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

LABEL_WIDTH = 120


def fixed_overrides(command_line: Iterable[str]) -> set[str]:
    """The keys the command line gives one value (every point has the same)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = list(command_line)
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except Exception:  # noqa: BLE001 - a label never fails a run: show everything
        return set()
    return {override.key_or_group for override in parsed if not override.is_sweep_override()}


def varying_overrides(point: Sequence[str], fixed: set[str]) -> list[str]:
    """The point's overrides whose keys the command line does not fix; all of them when none vary."""
    return [override for override in point if _key(override) not in fixed] or list(point)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def shown(overrides: Sequence[str]) -> str:
    text = " ".join(override.replace("\\", "") for override in overrides)
    return text if len(text) <= LABEL_WIDTH else text[: LABEL_WIDTH - 1] + "…"


def point_label(job: int, point: Sequence[str], fixed: set[str]) -> str:
    """`[job 3: module.lr=0.001]` (`[job 3]` without overrides): the prefix of a point's error lines."""
    text = shown(varying_overrides(point, fixed))
    return f"[job {job}: {text}]" if text else f"[job {job}]"


def recorded_command_line(sweep_record: Path) -> list[str]:
    """The sweep's command line, read only when a label is needed in a point's own process: as the sweeper recorded
    it (multirun.yaml's hydra.overrides.task), else this process's arguments (a sweeper that keeps no record, such
    as Optuna's, runs its points here with the basic launcher); empty when neither has overrides."""
    import sys

    from omegaconf import OmegaConf

    try:
        return [str(line) for line in OmegaConf.load(sweep_record).hydra.overrides.task]
    except Exception:  # noqa: BLE001 - no record
        return [argument for argument in sys.argv[1:] if "=" in argument and not argument.startswith("-")]
