"""backend.extra_args passes native arguments through, except those the canonical config owns: refused in one
line that names the canonical key, found from each backend's own translation."""
from __future__ import annotations

import pytest
from omegaconf import open_dict

from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare


def failures_of(compose_config, tmp_path, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config(*overrides, "module.data.source=mock", "task.dry_run=true"), run_dir=tmp_path,
                trains=False)
    return info.value.failures


@pytest.mark.parametrize("backend, native, canonical", [
    ("megatron", "micro_batch_size", "module.micro_batch_size"),
    ("megatron", "tensor_model_parallel_size", "module.parallel.tp"),
    ("megatron", "num_query_groups", "model.num_kv_heads"),
    ("torchtitan", "training.local_batch_size", "module.micro_batch_size"),
    ("maxtext", "per_device_batch_size", "module.micro_batch_size"),
    ("megatron_bridge", "train.train_iters", "module.train_iters"),
])
def test_an_extra_arg_the_canonical_config_owns_is_refused_naming_its_key(compose_config, tmp_path, backend, native,
                                                                          canonical):
    (line,) = failures_of(compose_config, tmp_path, f"backend={backend}", f"+backend.extra_args.{native}=0")
    assert line.startswith(f"backend.extra_args.{native}=0: backend={backend} sets {native} from {canonical}")


@pytest.mark.parametrize("extra", ["+backend.extra_args.hidden_dropout=0.1",  # a constant of the translation
                                   "+backend.extra_args.recompute_num_layers=2",  # not translated at all
                                   "+backend.extra_args.save=/elsewhere"])  # the patches' own, user wins
def test_what_the_canonical_config_does_not_own_passes_through(compose_config, tmp_path, extra):
    job = prepare(compose_config("backend=megatron", extra, "module.data.source=mock", "task.dry_run=true"),
                  run_dir=tmp_path, trains=False)
    key, value = extra[len("+backend.extra_args."):].split("=")
    assert str(job.cfg.backend.extra_args[key]) == value


@pytest.mark.parametrize("backend", ["megatron", "torchtitan", "maxtext", "megatron_bridge", "hummingbirdxt"])
def test_the_plain_copy_the_owners_are_searched_on_translates_as_the_config_does(compose_config, tmp_path, backend):
    """The owner search translates a plain copy of the config (backends/extra_args_owners.PlainTree): for every
    external backend it gives exactly the config's translation, so the fast path is the one taken."""
    from primus_hydra.backends.base import load_adapter
    from primus_hydra.backends.extra_args_owners import PlainTree, _translate

    stage = ["module=post_trainer"] if backend == "hummingbirdxt" else []  # its one stage: sft
    job = prepare(compose_config(f"backend={backend}", "model=moe_tiny", "module.data.source=mock", *stage,
                                 "task.dry_run=true"), run_dir=tmp_path, trains=False)
    adapter = load_adapter(job.cfg, job.layout, tmp_path)
    translated = _translate(adapter, adapter.cfg, adapter.layout)
    assert translated and _translate(adapter, PlainTree.of(adapter.cfg), adapter.layout) == translated


class _PlainCopyTrips:
    """An adapter whose translation reads the config as a DictConfig only when module.train_iters moved (as code
    that does more than read a config, in one branch): the owner search retries that variant on the config."""

    name = "plain_copy_trips"

    def __init__(self, cfg, layout, run_dir=None):
        self.cfg, self.layout, self.run_dir = cfg, layout, run_dir

    def convert_config(self) -> dict:
        from omegaconf import OmegaConf

        from primus_hydra.config.values import to_plain

        m = self.cfg.module
        steps = OmegaConf.select(self.cfg, "module.train_iters") if m.train_iters != 50 else m.train_iters
        return {"steps": steps, "sequence": m.seq_length, **(to_plain(self.cfg.backend.extra_args) or {})}


def test_a_variant_the_plain_copy_cannot_translate_is_translated_from_the_config(compose_config, tmp_path):
    from primus_hydra.backends.extra_args_owners import owned_extra_args_failures

    job = prepare(compose_config("module.train_iters=50", "module.data.source=mock", "task.dry_run=true"),
                  run_dir=tmp_path, trains=False)
    adapter = _PlainCopyTrips(job.cfg, job.layout, tmp_path)
    with open_dict(adapter.cfg.backend):
        adapter.cfg.backend.extra_args = {"steps": 7, "sequence": 9, "free": 1}
    assert owned_extra_args_failures(adapter) == [
        "backend.extra_args.steps=7: backend=plain_copy_trips sets steps from module.train_iters; set it instead "
        "(extra_args passes through only what the canonical config does not own)",
        "backend.extra_args.sequence=9: backend=plain_copy_trips sets sequence from module.seq_length; set it "
        "instead (extra_args passes through only what the canonical config does not own)"]


@pytest.mark.parametrize("backend", ["megatron", "torchtitan", "maxtext", "megatron_bridge"])
def test_leaving_out_the_values_the_translation_never_reads_finds_the_same_owners(compose_config, tmp_path, backend):
    """The search changes only the values its first translation read: for every native argument of each backend,
    the owners are those that changing every canonical value finds, in fewer translations."""
    from primus_hydra.backends import extra_args_owners
    from primus_hydra.backends.base import load_adapter

    job = prepare(compose_config(f"backend={backend}", "model=moe_tiny", "module.data.source=mock",
                                 "task.dry_run=true"), run_dir=tmp_path, trains=False)
    adapter = load_adapter(job.cfg, job.layout, tmp_path)
    translations = []
    translate = extra_args_owners._translate

    def counted(*args, **kwargs):
        translations.append(1)
        return translate(*args, **kwargs)

    extra_args_owners._translate = counted
    try:
        every_value = extra_args_owners.native_owners(adapter, skip_unread=False)
        tried_every_value, translations[:] = len(translations), []
        read_values = extra_args_owners.native_owners(adapter)
    finally:
        extra_args_owners._translate = translate
    assert any(every_value.values()) and read_values == every_value
    assert len(translations) < 0.8 * tried_every_value


def test_a_read_recorder_sees_every_way_a_dict_gives_its_values_away():
    import copy
    import json

    from primus_hydra.backends.extra_args_owners import _ReadRecorder, _Reads
    from primus_hydra.config.values import PlainTree

    def read_by(use) -> set[str]:
        reads = _Reads()
        tree = _ReadRecorder.over(PlainTree({"model": PlainTree({"a": 1, "sub": PlainTree({"x": 2})}),
                                             "module": PlainTree({"b": 3})}), reads)
        use(tree)
        unread = reads.unread_test()
        return {key for key in ("model.a", "model.sub.x", "module.b") if not unread(key)}

    assert read_by(lambda t: (t.model.a, t["module"].get("b"))) == {"model.a", "module.b"}
    assert read_by(lambda t: t.model.sub) == set()  # reaching a subtree reads none of its values
    for whole_model in (dict, lambda m: {**m}, json.dumps, repr, str, copy.deepcopy, list, lambda m: m == {},
                        lambda m: m.copied(), lambda m: {}.update(m), lambda m: m | {}, lambda m: sorted(m.items())):
        assert read_by(lambda t, use=whole_model: use(t.model)) == {"model.a", "model.sub.x"}, whole_model
