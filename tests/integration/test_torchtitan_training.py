"""backend=torchtitan trains through torchtitan's own Trainer in the project's workers, and means the same model as
backend=torch: from the same seed both start from the same weights and read the same batches, and follow the same
loss curve (fp32, 5 steps, 1e-4 relative); FSDP, TP and DDP layouts follow the one-process curve; a checkpoint
written with FSDP resumes with TP on the uninterrupted curve. The same holds for torchtitan's qwen3 (dense and MoE),
deepseek_v3 (MoE with latent attention) and llama4 (dense and MoE layers interleaved, scores on the experts' inputs).
gpt_oss, which backend=torch does not build, trains on the CPU (its flex attention in eager ops) with FSDP on its
one-process curve.

torchtitan 0.2 decays every parameter (backend=torch spares norms): the cross-backend runs set weight_decay=0."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.cli import primus
from helpers.curves import assert_same_curve, eval_losses, losses, trained_once
from helpers.libraries import needs_torchtitan
from helpers.overrides import GPT_OSS_TINY, LLAMA4_TINY, SHORT_RUN
from helpers.shared_runs import shared_run

pytestmark = [pytest.mark.slow, needs_torchtitan]

QUICK = [*SHORT_RUN, "module.weight_decay=0", "module.eval_interval=5", "module.eval_iters=2"]
QWEN3_TINY = ["model=qwen3_8b", "model.num_layers=2", "model.hidden_size=128", "model.num_attention_heads=4",
              "model.num_kv_heads=2", "model.head_dim=32", "model.ffn_hidden_size=256", "model.vocab_size=256"]


QWEN3_MOE_TINY = QWEN3_TINY + ["model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.ffn_hidden_size=64",
                               "model.moe.load_balancing_type=none"]
# DeepSeek-V3's routing (sigmoid scores, expert bias, group-limited top-k, shared expert) and latent attention
# with low-rank queries, at toy size; rope unscaled (torchtitan's deepseek_v3 scales only past the original length)
DEEPSEEK_TINY = ["model=deepseek_v3", "model.num_layers=2", "model.moe.first_dense_layers=1", "model.hidden_size=64",
                 "model.num_attention_heads=4", "model.num_kv_heads=4", "model.ffn_hidden_size=128",
                 "model.vocab_size=256", "model.mla.q_lora_rank=16", "model.mla.kv_lora_rank=32",
                 "model.mla.qk_rope_head_dim=8", "model.mla.qk_nope_head_dim=16", "model.mla.v_head_dim=16",
                 "model.moe.num_experts=8", "model.moe.top_k=2", "model.moe.router_num_groups=4",
                 "model.moe.router_group_topk=2", "model.moe.ffn_hidden_size=32", "model.moe.shared_experts=1",
                 "model.rope_scaling.type=none", "model.moe.load_balancing_type=none"]
LAYOUTS = {
    "fsdp2": ["launch.nproc_per_node=2", "module.parallel.fsdp=true"],
    "tp2": ["launch.nproc_per_node=2", "module.parallel.tp=2"],
    "dp_replicate2": ["launch.nproc_per_node=2"],
}


def train(run_dir: Path, *args: str) -> dict[int, float]:
    result = primus(f"hydra.run.dir={run_dir}", *QUICK, *args, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return losses(run_dir)


class Curve(dict):
    """step -> loss, and the run's held-out losses (step -> eval_loss)."""

    evals: dict[int, float]


@pytest.fixture(scope="module")
def torchtitan_curve(tmp_path_factory) -> Curve:
    run_dir = tmp_path_factory.mktemp("torchtitan") / "run"
    curve = Curve(train(run_dir, "backend=torchtitan"))
    curve.evals = eval_losses(run_dir)
    return curve


@pytest.fixture(scope="module")
def native_run(tmp_path_factory) -> Path:
    """The one-process backend=torch run (its final step saved, for the cross-backend checkpoints), trained once."""
    run_dir = tmp_path_factory.mktemp("native") / "run"
    train(run_dir, "backend=torch", "module.checkpoint.save_final=true")
    return run_dir


def test_torchtitan_follows_the_native_curve_from_the_same_seed(native_run, torchtitan_curve):
    """The default text source; mock batches come from the same TokenBatches code in every backend."""
    native = losses(native_run)
    assert_same_curve(torchtitan_curve, native)
    assert list(torchtitan_curve.evals) == [5]  # held out, forward only, in torchtitan's train context
    assert_same_curve(torchtitan_curve.evals, eval_losses(native_run))
    assert native[5] < native[1]


@pytest.fixture(scope="module")
def layout_run(tmp_path_factory):
    """Each layout's run, trained once, saving at step 3: its curve is checked by one test, and fsdp2's step 3 is what
    another resumes with tp."""
    return trained_once(lambda layout: tmp_path_factory.mktemp(layout) / "run",
                        lambda run_dir, layout: train(run_dir, "module.checkpoint.interval=3", "backend=torchtitan",
                                                      *LAYOUTS[layout]))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_torchtitan_layout_follows_the_one_process_curve(torchtitan_curve, layout_run, layout):
    run_dir = layout_run(layout)
    assert_same_curve(losses(run_dir), torchtitan_curve)
    assert_same_curve(eval_losses(run_dir), torchtitan_curve.evals)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(r["grad_norm"] > 0 and r["memory_gib"] > 0 and r["tflops"] > 0 for r in records)


def test_torchtitans_qwen3_moe_follows_the_native_curve_with_fsdp_and_ddp(tmp_path):
    """qwen3 (query/key norms, rotate-half rope, MoE experts renamed; llama4's FSDP and llama3's DDP imported by
    name, so patched there too) from the same weights as backend=torch: sharded and replicated data parallelism
    both follow the one-process native curve."""
    native = train(tmp_path / "native", "backend=torch", *QWEN3_MOE_TINY, "module.micro_batch_size=8")
    for layout in ("fsdp2", "dp_replicate2"):
        assert_same_curve(train(tmp_path / layout, "backend=torchtitan", *QWEN3_MOE_TINY, *LAYOUTS[layout]), native)
    assert native[5] < native[1]


def test_torchtitans_deepseek_v3_follows_the_native_curve_with_fsdp_and_tp(tmp_path):
    """MoE and latent attention from the same weights as backend=torch (experts renamed, rotary rows of the latent
    attention reordered). One micro-batch per step and rank: the expert bias moves once per step in both backends.
    tp=2 holds only with the patch torchtitan.moe.tp_router_gradients (the router's gradient summed over tp)."""
    one_batch = ["module.micro_batch_size=8"]
    native = train(tmp_path / "native", "backend=torch", *DEEPSEEK_TINY, *one_batch)
    assert_same_curve(train(tmp_path / "fsdp2", "backend=torchtitan", *DEEPSEEK_TINY, *LAYOUTS["fsdp2"]), native)
    assert_same_curve(train(tmp_path / "tp2", "backend=torchtitan", *DEEPSEEK_TINY, *one_batch, *LAYOUTS["tp2"]),
                      native)
    assert native[5] < native[1]


def test_torchtitans_llama4_follows_the_native_curve_in_one_process_and_with_fsdp(tmp_path, tmp_path_factory):
    """Interleaved dense and MoE layers and the score on the expert's input, from the same weights as backend=torch;
    the expert bias moves once per step in both backends (one micro-batch per step and rank). backend=torch's run is
    the one test_megatron_training.py's Llama 4 test reads, trained once."""
    native = losses(shared_run("llama4_native", tmp_path_factory))
    assert_same_curve(train(tmp_path / "one", "backend=torchtitan", *LLAMA4_TINY, "module.micro_batch_size=8"), native)
    assert_same_curve(train(tmp_path / "fsdp2", "backend=torchtitan", *LLAMA4_TINY, *LAYOUTS["fsdp2"]), native)
    assert native[5] < native[1]


def test_torchtitans_gpt_oss_trains_on_the_cpu_and_fsdp_and_tp_follow_its_one_process_curve(tmp_path):
    """gpt_oss (sinks, a window on layer 0, biases, the clamped SwiGLU, YaRN): its flex attention through
    torchtitan.cpu.flex_attention; two FSDP ranks and two tensor-parallel ranks give the one-process losses (tp: only
    with the router's score gradient summed over tp, torchtitan.moe.tp_router_gradients: 1e-3 off by step 4 without)."""
    one = train(tmp_path / "one", "backend=torchtitan", *GPT_OSS_TINY, "module.micro_batch_size=8")
    assert one[5] < one[1] - 0.3, one
    for layout in ("fsdp2", "tp2"):
        assert_same_curve(train(tmp_path / layout, "backend=torchtitan", *GPT_OSS_TINY, *LAYOUTS[layout]), one)


def test_an_fsdp_checkpoint_resumes_with_tp_on_the_uninterrupted_curve(tmp_path, torchtitan_curve, layout_run):
    step = layout_run("fsdp2") / "checkpoints" / "step_0000003"
    meta = json.loads((step / "meta.json").read_text())
    assert (meta["backend"], meta["format"], meta["world_size"]) == ("torchtitan", "torch.distributed.checkpoint", 2)
    assert (step / ".metadata").is_file()  # torch.distributed.checkpoint's own index
    run_dir = tmp_path / "run"
    resumed = primus(f"hydra.run.dir={run_dir}", *QUICK, "backend=torchtitan", *LAYOUTS["tp2"],
                     f"module.checkpoint.resume={step}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in (run_dir / "logs" / "rank_0.log").read_text()
    assert sorted(losses(run_dir)) == [4, 5]
    first = {s: loss for s, loss in losses(layout_run("fsdp2")).items() if s <= 3}
    assert_same_curve({**first, **losses(run_dir)}, torchtitan_curve)


def test_a_default_torchtitan_run_writes_the_project_run_files(tmp_path):
    run_dir = tmp_path / "run"
    result = primus(f"hydra.run.dir={run_dir}", "backend=torchtitan", "module.train_iters=3", "module.seq_length=64",
                    cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(losses(run_dir)) == [1, 2, 3]
    assert (run_dir / "loss_curve.png").stat().st_size > 0 and list((run_dir / "tensorboard").iterdir())
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_0000003"
    assert (run_dir / ".primus" / "tokenizer" / "tokenizer.json").is_file()
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, expected", [
    (["+backend.extra_args.training.bogus_knob=1"],
     "error: backend=torchtitan: torchtitan 0.2.2 does not know bogus_knob (a key of its Training section)"),
    (["+backend.extra_args.bogus_section.x=1"],
     "error: backend=torchtitan: torchtitan 0.2.2 does not know bogus_section (a section)"),
    (["model.tie_embeddings=true"], "error: model.tie_embeddings=true: torchtitan's llama3 has no tied embeddings"),
    (["launch.nproc_per_node=2", "module.parallel.cp=2"],
     "error: module.parallel.cp=2: torchtitan's context parallelism shards GPU attention kernels"),
    (QWEN3_TINY + ["launch.nproc_per_node=2", "module.parallel.tp=2"],
     "error: module.parallel.tp=2: torchtitan's qwen3 runs attention on tensor-parallel DTensors"),
    (["model=mixtral_8x7b", "launch.allow_oversubscribe=true"],
     "error: model=mixtral_8x7b: backend=torchtitan trains the llama, qwen3, deepseek, llama4, gpt_oss families"),
    (DEEPSEEK_TINY + ["launch.nproc_per_node=2", "module.parallel.fsdp=true", "module.parallel.ep=2",
                      "module.micro_batch_size=4", "module.global_batch_size=8"],
     "error: module.parallel.ep=2: torchtitan's expert parallelism permutes tokens with triton GPU kernels"),
], ids=["unknown_key", "unknown_section", "tied_embeddings", "cp_on_cpu", "qwen3_tp_on_cpu", "other_family", "ep_on_cpu"])
def test_what_torchtitan_cannot_run_is_one_line_before_any_worker(tmp_path, args, expected):
    result = primus("backend=torchtitan", "module.train_iters=2", *args, cwd=tmp_path,
                    env={"PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[0].startswith(expected), result.stderr[-2000:]


def test_checkpoints_cross_between_torchtitan_and_the_native_backend(tmp_path, native_run):
    """A native step loads into torchtitan (FSDP), and that torchtitan run's step loads into native: each pair of
    runs started from the same weights follows the same curve."""
    saving = ["module.checkpoint.save_final=true"]
    from_native = {backend: train(tmp_path / f"{backend}_from_native", f"backend={backend}", *extra, *saving,
                                  f"module.checkpoint.load={native_run / 'checkpoints'}")
                   for backend, extra in (("torchtitan", LAYOUTS["fsdp2"]), ("torch", []))}
    assert_same_curve(from_native["torchtitan"], from_native["torch"])
    titan_step = tmp_path / "torchtitan_from_native" / "checkpoints"
    from_titan = {backend: train(tmp_path / f"{backend}_from_titan", f"backend={backend}",
                                 f"module.checkpoint.load={titan_step}") for backend in ("torch", "torchtitan")}
    assert_same_curve(from_titan["torch"], from_titan["torchtitan"])
    assert not (tmp_path / "torch_from_titan" / ".primus" / "converted").exists()
