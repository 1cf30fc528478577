"""Weights made shard by shard (backends/common/weights.py): any split of a parameter, drawn piece by piece, is
bitwise the parameter drawn whole; the values depend on the seed and the name, and on nothing else."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from primus_hydra.backends.common import weights  # noqa: E402


def drawn_whole(shape, seed=7, name="layers.0.attention.wq.weight", std=0.02):
    full = torch.empty(shape)
    weights.fill_normal_shard(full, tuple(shape), (0,) * len(shape), std, seed, name)
    return full


def drawn_in_pieces(shape, row_cuts, column_cuts=None, seed=7, name="layers.0.attention.wq.weight", std=0.02):
    """The tensor assembled from shards [r0:r1, c0:c1], each drawn on its own as a rank would."""
    out = torch.full(shape, float("nan"))
    rows = list(zip([0, *row_cuts], [*row_cuts, shape[0]]))
    columns = list(zip([0, *column_cuts], [*column_cuts, shape[1]])) if column_cuts is not None else [(0, None)]
    for r0, r1 in rows:
        for c0, c1 in columns:
            offset = (r0, c0) + (0,) * (len(shape) - 2) if len(shape) > 1 else (r0,)
            piece = out[r0:r1, c0:c1] if len(shape) == 2 else out[r0:r1]
            local = torch.empty(piece.shape)
            weights.fill_normal_shard(local, tuple(shape), offset, std, seed, name)
            piece.copy_(local)
    return out


@pytest.mark.parametrize("shape, row_cuts, column_cuts", [
    ((64, 48), [32], None),                 # FSDP2 / column-wise TP: rows split in two
    ((64, 48), [11, 40], None),             # uneven shards
    ((64, 48), [], [24]),                   # row-wise TP: columns split
    ((64, 48), [32], [12, 30]),             # TP x FSDP2: both
    ((8, 6, 5), [3, 5], None),              # stacked MoE experts sharded over experts
    ((100,), [33, 66], None),               # a 1-D parameter
])
def test_any_split_drawn_piece_by_piece_is_the_tensor_drawn_whole(shape, row_cuts, column_cuts):
    assert torch.equal(drawn_in_pieces(shape, row_cuts, column_cuts), drawn_whole(shape))


def test_a_parameter_larger_than_one_block_splits_across_blocks(monkeypatch):
    monkeypatch.setattr(weights, "BLOCK_ELEMENTS", 16 * 48)  # 16 rows per block: shards cross block edges
    assert torch.equal(drawn_in_pieces((64, 48), [5, 21, 40], [7]), drawn_whole((64, 48)))


def test_values_depend_on_the_seed_and_the_name_and_have_the_asked_spread():
    base = drawn_whole((256, 256))
    assert not torch.equal(base, drawn_whole((256, 256), seed=8))
    assert not torch.equal(base, drawn_whole((256, 256), name="layers.1.attention.wq.weight"))
    assert abs(base.std().item() - 0.02) < 0.001 and abs(base.mean().item()) < 0.001


def test_the_native_model_starts_from_the_same_weights_on_any_device_count(compose_config):
    """One process's weights are those of the seed and names alone: two builds agree bitwise."""
    from primus_hydra.backends.torch.model import build_model_on_meta, materialize

    model_cfg = compose_config().model
    first = materialize(build_model_on_meta(model_cfg), torch.device("cpu"), seed=3).state_dict()
    second = materialize(build_model_on_meta(model_cfg), torch.device("cpu"), seed=3).state_dict()
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
