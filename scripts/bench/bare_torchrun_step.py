"""Baseline for bench_launch_first_step.py: what a user would write by hand for `torchrun --nproc_per_node 2`:
build the same model (llama_tiny), wrap it in DDP over gloo, run one AdamW step on the same batch shape."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import yaml
from omegaconf import OmegaConf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src"))
from primus_hydra.backends.torch.model import build_model_on_meta, materialize  # noqa: E402
from primus_hydra.config.schema_model import ModelConfig  # noqa: E402

CONF = os.path.join(os.path.dirname(__file__), "..", "..", "conf", "model", "llama_tiny.yaml")

dist.init_process_group("gloo")
args = OmegaConf.merge(OmegaConf.structured(ModelConfig), yaml.safe_load(open(CONF)))
model = torch.nn.parallel.DistributedDataParallel(materialize(build_model_on_meta(args), torch.device("cpu"), seed=0))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
window = torch.randint(0, args.vocab_size, (8, 257))
started = time.perf_counter()
logits = model(window[:, :-1])
loss = F.cross_entropy(logits.view(-1, args.vocab_size), window[:, 1:].reshape(-1))
loss.backward()
optimizer.step()
if dist.get_rank() == 0:
    print(f"step 1/1 | loss {loss.item():.4f} | {time.perf_counter() - started:.3f} s", flush=True)
dist.destroy_process_group()
