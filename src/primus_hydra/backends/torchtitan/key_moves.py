"""Keys that torchtitan moved between releases, so that a job config written with either release's names reaches the
installed release under its own names (the build_args patches torchtitan.args.keys_* in patches.py apply them).

torchtitan 0.2.1 opened a `debug` section and moved the seed, determinism and MoE load-balance switches into it
(0.2.0: training.seed / training.deterministic / training.debug_moe_force_load_balance), and moved DeepSeek-V3's
node-limited routing into its MoE args (0.2.0: n_expert_groups / n_limited_groups of DeepSeekV3ModelArgs). Primus's
PR #952 is why this matters: a config kept the 0.2.0 name after the move, and every DeepSeek run trained with load
balancing off.
Here the old name is moved, with a log line, instead of being lost; a key that no release knows is refused by the
installed torchtitan's own ConfigManager (job_file.py), before any worker starts.
"""
from __future__ import annotations

import logging

from primus_hydra.errors import PrimusError

log = logging.getLogger(__name__)

# (the dotted path before the move, the path after it); torchtitan 0.2.1 made every move here
MOVES_OF_0_2_1 = (
    ("training.seed", "debug.seed"),
    ("training.deterministic", "debug.deterministic"),
    ("training.debug_moe_force_load_balance", "debug.moe_force_load_balance"),
    ("model_args.n_expert_groups", "model_args.moe_args.num_expert_groups"),
    ("model_args.n_limited_groups", "model_args.moe_args.num_limited_groups"),
)
MOVED_IN = "0.2.1"


def move_keys(args: dict, moves: tuple[tuple[str, str], ...], version: str | None) -> list[str]:
    """Moves each `source` path of `args` (dotted: section.key, section.table.key) to `target`, in place; returns
    what moved, as lines."""
    moved = []
    for source, target in moves:
        *from_tables, from_key = source.split(".")
        *to_tables, to_key = target.split(".")
        holders = [args]
        for name in from_tables:
            holders.append((holders[-1].get(name) or {}) if isinstance(holders[-1], dict) else {})
        if not isinstance(holders[-1], dict) or from_key not in holders[-1]:
            continue
        value = holders[-1].pop(from_key)
        for name, holder in zip(reversed(from_tables), reversed(holders[:-1])):  # tables the move left empty
            if holder.get(name) == {}:
                holder.pop(name)
        table = args
        for name in to_tables:
            table = table.setdefault(name, {})
        if table.get(to_key) is not None and table[to_key] != value:
            raise PrimusError(f"backend=torchtitan: {source}={value!r} and {target}={table[to_key]!r} name the same "
                              f"torchtitan {version} setting ({target}); keep one")
        table[to_key] = value
        moved.append(f"{source} -> {target}")
    for line in moved:
        log.info("torchtitan %s: %s (the key moved in torchtitan %s)", version, line, MOVED_IN)
    return moved


def reversed_moves(moves: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((target, source) for source, target in moves)
