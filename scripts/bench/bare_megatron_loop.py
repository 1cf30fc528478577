"""Baseline for bench_megatron.py: the megatron.core training loop a user would write by hand for
`torchrun --nproc_per_node 2` on the CPU: gloo, megatron-core's parallel state, GPTModel (the same arguments as
backend=megatron translates), megatron DDP + distributed optimizer, get_forward_backward_func; random token batches.
Rank 0 prints one JSON line: the time of every step. Usage: torchrun --nproc_per_node 2 bare_megatron_loop.py STEPS"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from helpers.compose import compose_primus  # noqa: E402
from primus_hydra.backends.megatron import patches  # noqa: E402
from primus_hydra.backends.megatron.args import build_megatron_args  # noqa: E402
from primus_hydra.backends.megatron.core_config import quiet_library_logs  # noqa: E402
from primus_hydra.backends.megatron.core_model import build_gpt_model  # noqa: E402
from primus_hydra.backends.megatron.cpu_patches import install_cpu_support  # noqa: E402
from primus_hydra.config.layout import parallel_layout  # noqa: E402

STEPS, MICRO, GLOBAL, SEQ = int(sys.argv[1]), 4, 8, 256

quiet_library_logs()
dist.init_process_group("gloo")
from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads  # noqa: E402
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
from megatron.core.pipeline_parallel import get_forward_backward_func  # noqa: E402

parallel_state.initialize_model_parallel(1, 1)
install_cpu_support()
patches.router_gemm_without_te(None)
tensor_parallel.model_parallel_cuda_manual_seed(0)
cfg = compose_primus("backend=megatron", "model=llama_tiny", f"launch.nproc_per_node={dist.get_world_size()}",
                     f"module.micro_batch_size={MICRO}", f"module.global_batch_size={GLOBAL}", f"module.seq_length={SEQ}")
args = build_megatron_args(cfg, parallel_layout(cfg, dist.get_world_size()))
torch.manual_seed(0)
model = build_gpt_model(args, device_type="cpu")
model.config.finalize_model_grads_func = finalize_model_grads
ddp = DistributedDataParallel(model.config, DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                                                          use_distributed_optimizer=True), model)
optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=3e-3, weight_decay=0.1, adam_beta1=0.9,
                                                   adam_beta2=0.95, clip_grad=1.0, use_distributed_optimizer=True), [ddp])
accum = GLOBAL // (MICRO * dist.get_world_size())


def forward_step(batches, model):
    tokens = next(batches)
    output = model(tokens[:, :-1], None, None, labels=tokens[:, 1:])
    return output, lambda out: (out.float().mean(), {"lm loss": out.detach().float().mean()})


times = []
for _ in range(STEPS):
    started = time.perf_counter()
    ddp.zero_grad_buffer()
    optimizer.zero_grad()
    batches = iter([torch.randint(0, cfg.model.vocab_size, (MICRO, SEQ + 1)) for _ in range(accum)])
    losses = get_forward_backward_func()(forward_step_func=forward_step, data_iterator=batches, model=[ddp],
                                         num_microbatches=accum, seq_length=SEQ, micro_batch_size=MICRO,
                                         forward_only=False)
    optimizer.step()
    loss = torch.stack([out["lm loss"] for out in losses]).mean()
    dist.all_reduce(loss)
    loss.item()
    times.append(time.perf_counter() - started)
if dist.get_rank() == 0:
    print(json.dumps({"step_times": times}), flush=True)
parallel_state.destroy_model_parallel()
dist.destroy_process_group()
