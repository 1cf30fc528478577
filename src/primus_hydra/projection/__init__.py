"""Projection: per-GPU memory, step time and the best parallel layout of a composed config, on paper.

Pure Python over the composed config (no torch, nothing written): hardware.py reads the `hardware/` entry,
parameters.py places the model's parameters on ranks, memory.py adds bytes per backend, step_time.py models a
step, search.py walks the layouts. docs/projection.md gives every formula and its source.
"""
