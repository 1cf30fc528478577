"""What task=projection shows on stderr: one projection as a few lines, a search as a ranked table."""
from __future__ import annotations

from primus_hydra.projection.project import Projection
from primus_hydra.util.tables import aligned_table


def layout_label(projection: Projection) -> str:
    layout = projection.layout
    parts = [f"tp {layout.tp}", f"pp {layout.pp}" + (f"x{layout.vpp}" if layout.vpp > 1 else ""), f"cp {layout.cp}",
             f"ep {layout.ep}", f"dp {layout.dp}", f"mb {layout.micro_batch}", f"ga {layout.grad_accum}"]
    if layout.fsdp:
        parts.append("fsdp")
    elif layout.distributed_optimizer:
        parts.append("dist-opt")
    if layout.sequence_parallel:
        parts.append("sp")
    parts.append(f"recompute {layout.recompute}")
    return ", ".join(parts)


def describe(projection: Projection, model_name: str) -> str:
    data = projection.to_dict()
    memory, time = data["memory_gib"], data["step_time_s"]
    comm = time["communication"]
    exposed = ", ".join(f"{key} {value:.3g}" for key, value in comm.items() if key != "total" and value > 0) or "none"
    hardware = projection.hardware
    device = hardware.device_word
    verdict = "fits" if projection.fits else "DOES NOT FIT"
    return "\n".join([
        f"projection: {model_name}, backend={projection.layout.backend}, {projection.layout.precision}, "
        f"{projection.layout.world} x {hardware.name} ({layout_label(projection)})",
        f"  parameters      {data['parameters']:,} total, {data['parameters_per_gpu']:,} on the most loaded {device} "
        f"(pipeline stage {data['most_loaded_stage']})",
        f"  {'memory per ' + device:<15} weights {memory['weights']:.2f} + gradients {memory['gradients']:.2f} + optimizer "
        f"{memory['optimizer']:.2f} + activations {memory['activations']:.2f} + overhead {memory['overhead']:.2f} "
        f"= {memory['total']:.2f} GiB of {data['usable_memory_gib']:.1f} usable: {verdict}",
        f"  step            {time['total']:.4g} s = compute {time['compute']:.4g} + optimizer {time['optimizer']:.3g} "
        f"+ exposed communication {comm['total']:.3g} ({exposed}) + bubble {time['bubble']:.3g}",
        f"  throughput      {data['tokens_per_s']:,.0f} tokens/s, MFU {100 * data['mfu']:.1f} % of "
        f"{hardware.peak_tflops:.4g} TFLOP/s ({hardware.peak_source})",
    ])


def search_table(ranked: list) -> str:
    device = ranked[0].projection.hardware.device_word if ranked else "GPU"
    header = ["#", "tp", "pp", "vpp", "cp", "ep", "dp", "mb", "state", "recompute", f"GiB/{device}", "tokens/s", "MFU"]
    rows = []
    for index, entry in enumerate(ranked, 1):
        p, layout = entry.projection, entry.projection.layout
        state = "fsdp" if layout.fsdp else "dist-opt" if layout.distributed_optimizer else "replicated"
        rows.append([str(index), str(layout.tp), str(layout.pp), str(layout.vpp), str(layout.cp), str(layout.ep),
                     str(layout.dp), str(layout.micro_batch), state, layout.recompute, f"{p.stage.total / 2**30:.1f}",
                     f"{p.tokens_per_s:,.0f}", f"{100 * p.mfu:.1f}%"])
    return aligned_table(header, rows, rule=True)
