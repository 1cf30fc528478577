"""Keys that torchtitan moved between releases, so that a job config written with either release's names reaches the
installed release under its own names (the build_args patches torchtitan.args.keys_* in patches.py apply them).

torchtitan 0.2.1 opened a `debug` section and moved the seed, determinism and MoE load-balance switches into it
(0.2.0: training.seed / training.deterministic / training.debug_moe_force_load_balance). Primus's PR #952 is why
this matters: a config kept the 0.2.0 name after the move, and every DeepSeek run trained with load balancing off.
Here the old name is moved, with a log line, instead of being lost; a key that no release knows is refused by the
installed torchtitan's own ConfigManager (job_file.py), before any worker starts.
"""
from __future__ import annotations

import logging

from primus_hydra.errors import PrimusError

log = logging.getLogger(__name__)

# (the name before the move, the name after it); torchtitan 0.2.1 made every move here
DEBUG_SECTION_MOVES = (
    ("training.seed", "debug.seed"),
    ("training.deterministic", "debug.deterministic"),
    ("training.debug_moe_force_load_balance", "debug.moe_force_load_balance"),
)
DEBUG_SECTION_SINCE = "0.2.1"


def move_keys(args: dict, moves: tuple[tuple[str, str], ...], version: str | None) -> list[str]:
    """Moves each `source` key of `args` (section.key) to `target`, in place; returns what moved, as lines."""
    moved = []
    for source, target in moves:
        (from_section, from_key), (to_section, to_key) = source.split("."), target.split(".")
        values = args.get(from_section) or {}
        if from_key not in values:
            continue
        value = values.pop(from_key)
        if not values:
            args.pop(from_section, None)
        section = args.setdefault(to_section, {})
        if to_key in section and section[to_key] is not None and section[to_key] != value:
            raise PrimusError(f"backend=torchtitan: {source}={value!r} and {target}={section[to_key]!r} name the same "
                              f"torchtitan {version} setting ({target}); keep one")
        section[to_key] = value
        moved.append(f"{source} -> {target}")
    for line in moved:
        log.info("torchtitan %s: %s (the key moved in torchtitan %s)", version, line, DEBUG_SECTION_SINCE)
    return moved


def reversed_moves(moves: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((target, source) for source, target in moves)
