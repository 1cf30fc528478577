"""backend.trainer=megatron_lm without a checkout: the flags built for Megatron-LM's own parser (store_true,
store_false such as --disable-bias-linear, values, lists; defaults left out; an unknown destination is one line)
and the check that a checkout's megatron-core is the installed one."""
from __future__ import annotations

import argparse

import pytest

from helpers.compose import compose_primus
from primus_hydra.backends.base import load_adapter
from primus_hydra.backends.megatron.megatron_lm import (
    checkout_version,
    command_line,
    parse_with_megatron,
    version_failure,
)
from primus_hydra.config.layout import parallel_layout
from primus_hydra.errors import PrimusError


def parser_like_megatrons() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--num-layers", type=int, default=None)
    parser.add_argument("--swiglu", action="store_true")
    parser.add_argument("--disable-bias-linear", action="store_false", dest="add_bias_linear")
    parser.add_argument("--norm-epsilon", type=float, default=1e-5, dest="layernorm_epsilon")
    parser.add_argument("--data-path", nargs="*", default=None)
    parser.add_argument("--lr", type=float, default=None)
    return parser


def test_flags_reproduce_the_arguments_through_the_parser():
    args = {"num_layers": 4, "swiglu": True, "add_bias_linear": False, "layernorm_epsilon": 1e-6,
            "data_path": ["/d/a", "/d/b"], "lr": None}
    parser = parser_like_megatrons()
    argv = command_line(args, parser)
    assert argv == ["--num-layers", "4", "--swiglu", "--disable-bias-linear", "--norm-epsilon", "1e-06",
                    "--data-path", "/d/a", "/d/b"]
    namespace = parse_with_megatron(argv, parser)
    assert {key: getattr(namespace, key) for key in args} == args


def test_values_equal_to_the_parsers_defaults_are_left_out():
    assert command_line({"swiglu": False, "add_bias_linear": True, "layernorm_epsilon": 1e-5}, parser_like_megatrons()) == []


def test_a_destination_the_parser_does_not_know_is_one_line():
    """Megatron-LM up to core_v0.15 stored --norm-epsilon into norm_epsilon: against a newer parser it fails."""
    with pytest.raises(PrimusError, match=r"^backend_args.norm_epsilon: Megatron-LM's parser has no argument that "
                                          r"stores into 'norm_epsilon' \(renamed or removed in this checkout\)"):
        command_line({"norm_epsilon": 1e-6}, parser_like_megatrons())


def test_a_value_no_flag_can_express_is_one_line():
    parser = parser_like_megatrons()
    parser.set_defaults(add_bias_linear=False)
    with pytest.raises(PrimusError, match=r"^backend_args.add_bias_linear=True: no flag of Megatron-LM's parser"):
        command_line({"add_bias_linear": True}, parser)


def write_checkout(root, major, minor, patch):
    (root / "megatron" / "core").mkdir(parents=True)
    (root / "megatron" / "training").mkdir(parents=True)
    (root / "megatron" / "training" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (root / "megatron" / "core" / "package_info.py").write_text(f"MAJOR = {major}\nMINOR = {minor}\nPATCH = {patch}\n")
    return root


def test_the_checkouts_version_is_read_without_importing_it(tmp_path):
    assert checkout_version(write_checkout(tmp_path, 0, 16, 1)) == "0.16.1"
    assert version_failure(tmp_path, "0.16.1") is None


def test_a_checkout_of_another_release_is_one_line(tmp_path):
    root = write_checkout(tmp_path / "Megatron-LM", 0, 15, 3)
    assert version_failure(root, "0.16.1") == (
        f"backend.path={root}: the Megatron-LM checkout is megatron-core 0.15.3 but megatron-core 0.16.1 is installed; "
        "check out tag core_v0.16.1 or install megatron-core==0.15.3")


def test_megatron_lm_without_a_checkout_is_one_line(monkeypatch):
    monkeypatch.setenv("PRIMUS_THIRDPARTY_DIR", "/nonexistent")
    cfg = compose_primus("backend=megatron", "backend.trainer=megatron_lm", "module.data.source=mock")
    assert load_adapter(cfg, parallel_layout(cfg, 1)).training_failures() == [
        "backend.trainer=megatron_lm needs a Megatron-LM checkout (with megatron/training): set backend.path=<dir>, "
        "$BACKEND_PATH or third_party/Megatron-LM, or use backend.trainer=core"]


def test_auto_picks_megatron_lm_only_with_a_checkout_and_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIMUS_THIRDPARTY_DIR", "/nonexistent")
    root = write_checkout(tmp_path / "Megatron-LM", 0, 16, 1)
    with_checkout = compose_primus("backend=megatron", f"backend.path={root}", "module.data.source=mock")
    adapter = load_adapter(with_checkout, parallel_layout(with_checkout, 1))
    adapter.runs_on_gpu = True
    assert adapter.trainer_name == "megatron_lm"
    adapter.runs_on_gpu = False
    assert adapter.trainer_name == "core"
    without = compose_primus("backend=megatron", "module.data.source=mock", "platform.device=cuda")
    assert load_adapter(without, parallel_layout(without, 1)).trainer_name == "core"
