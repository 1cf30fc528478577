"""benchmark.json, the table on the terminal and the PNG plots of a benchmark run (rank 0)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from primus_hydra.util.tables import aligned_table

RESULTS_FILE = "benchmark.json"


def write_results(run_dir: Path, suite: str, device: str, records: list[dict]) -> Path:
    path = Path(run_dir) / RESULTS_FILE
    path.write_text(json.dumps({"suite": suite, "device": device, "results": records}, indent=1))
    return path


def _gib_per_s(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def table(suite: str, records: list[dict]) -> str:
    if suite == "gemm":
        header = ["shape", "m", "n", "k", "dtype", "ms", "TFLOP/s", "of peak"]
        rows = [[r["shape"], str(r["m"]), str(r["n"]), str(r["k"]), r["dtype"].replace("torch.", ""),
                 f"{r['time_s'] * 1e3:.3f}", f"{r['tflops']:.3f}",
                 "-" if r["peak_fraction"] is None else f"{100 * r['peak_fraction']:.0f}%"] for r in records]
    elif suite == "attention":
        header = ["backend", "heads/kv", "head dim", "seq", "dtype", "fwd ms", "fwd TFLOP/s", "bwd ms", "bwd TFLOP/s"]
        rows = [[r["backend"], f"{r['heads']}/{r['kv_heads']}", str(r["head_dim"]), str(r["seq"]),
                 r["dtype"].replace("torch.", ""), f"{r['forward_s'] * 1e3:.2f}", f"{r['forward_tflops']:.3f}",
                 f"{r['backward_s'] * 1e3:.2f}", f"{r['backward_tflops']:.3f}"]
                for r in records if r.get("available")]
        missing = [f"{r['backend']}: not available here ({r['reason']})" for r in records if not r.get("available")]
        return aligned_table(header, rows, rule=True) + "".join(f"\n{line}" for line in missing)
    else:
        header = ["op", "group", "ranks", "bytes", "us", "algbw GB/s", "busbw GB/s", "correct"]
        rows = [[r["op"], r["group"], str(r["world_size"]), f"{r['bytes']:,}", f"{r['time_s'] * 1e6:.1f}",
                 _gib_per_s(r["algbw_gbps"]), _gib_per_s(r["busbw_gbps"]),
                 "yes" if r["correct"] else f"NO ({r['mismatched_elements']:,} elements wrong)"] for r in records]
        notes = sorted({r["note"] for r in records if r.get("note")})
        return aligned_table(header, rows, rule=True) + "".join(f"\nnote: {note}" for note in notes)
    return aligned_table(header, rows, rule=True)


def plot(suite: str, records: list[dict], run_dir: Path) -> Optional[Path]:
    """gemm: TFLOP/s against size per dtype (square shapes); collectives: bus bandwidth against message size per op
    and group. Attention has one point per backend: its table says it all."""
    if suite == "attention" or not records:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axis = plt.subplots(figsize=(7, 4.5))
    if suite == "gemm":
        for dtype in sorted({r["dtype"] for r in records}):
            points = sorted((r["m"], r["tflops"]) for r in records if r["dtype"] == dtype and r["shape"] == "square"
                            and r.get("rank", 0) == 0)
            if points:
                axis.plot(*zip(*points), marker="o", label=dtype.replace("torch.", ""))
        axis.set_xscale("log", base=2)
        axis.set_xlabel("M = N = K")
        axis.set_ylabel("TFLOP/s")
        axis.set_title("GEMM throughput")
    else:
        for op, group in sorted({(r["op"], r["group"]) for r in records}):
            points = sorted((r["bytes"], r["busbw_gbps"]) for r in records if r["op"] == op and r["group"] == group)
            axis.plot(*zip(*points), marker="o", label=f"{op} ({group})")
        axis.set_xscale("log", base=2)
        axis.set_xlabel("message bytes")
        axis.set_ylabel("bus bandwidth GB/s")
        axis.set_title("collectives (nccl-tests' bus bandwidth)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    path = Path(run_dir) / f"benchmark_{suite}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
