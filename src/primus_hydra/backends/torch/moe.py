"""Mixture of experts with top-k routing (Mixtral: softmax; DeepSeek-V3: sigmoid, group-limited, bias-balanced;
DeepSeek-V4: sqrtsoftplus; Llama 4: the router's weight scales the expert's input, not its output).

Experts are stored as stacked weights (experts, ...) so that even DeepSeek-V3 builds quickly on the meta device.
Dispatch is a plain loop over experts: clear and exact, which is what a CPU reference needs.

The balancing loss follows megatron-core's router (switch_load_balancing_loss_func): aux_loss over the micro-batch,
seq_aux_loss per sequence, global_aux_loss with the experts' loads counted over the global batch, i.e. summed over
the data-parallel group (`balance_over_data_parallel`) and averaged over the step's micro-batches so far.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from primus_hydra.backends.torch.layers import FeedForward
from primus_hydra.config.model_math import shared_expert_ffn_hidden_size
from primus_hydra.errors import PrimusError

_NO_GROUP_GIVEN = object()  # balance_over_data_parallel was not called (None is the default process group)
_ALONE = object()  # balance_over_data_parallel with one data-parallel rank: nothing to sum


def router_scores(logits: torch.Tensor, score_function: str) -> torch.Tensor:
    """Each expert's affinity for each token: softmax over the experts, or per expert sigmoid or sqrt(softplus)
    (DeepSeek-V4: positive like softplus, growing like a square root)."""
    if score_function == "sigmoid":
        return logits.sigmoid()
    if score_function == "sqrtsoftplus":
        return F.softplus(logits).sqrt()
    return logits.softmax(dim=-1)


class MoE(nn.Module):
    def __init__(self, args):
        super().__init__()
        moe, h = args.moe, args.hidden_size
        self.num_experts, self.top_k = moe.num_experts, moe.top_k
        self.score_function = str(moe.router_score_function)
        self.num_groups, self.group_topk = moe.router_num_groups, moe.router_group_topk
        self.norm_topk_prob, self.scaling = moe.router_norm_topk_prob, moe.router_topk_scaling_factor
        self.balancing = str(moe.load_balancing_type)
        self.aux_loss_coeff, self.z_loss_coeff = moe.aux_loss_coeff, moe.z_loss_coeff
        self.router = nn.Linear(h, self.num_experts, bias=False)
        # aux-loss-free balancing (DeepSeek-V3): a per-expert bias that shifts selection, updated by rule, not by grads
        self.expert_bias = nn.Parameter(torch.zeros(self.num_experts), requires_grad=False) if moe.router_enable_expert_bias else None
        self.bias_update_rate = moe.router_bias_update_rate
        self.score_before_experts = bool(getattr(moe, "score_before_experts", False))  # Llama 4: weight the input
        f = moe.ffn_hidden_size
        self.w1 = nn.Parameter(torch.empty(self.num_experts, f, h))
        self.w3 = nn.Parameter(torch.empty(self.num_experts, f, h))
        self.w2 = nn.Parameter(torch.empty(self.num_experts, h, f))
        self.shared = FeedForward(h, shared_expert_ffn_hidden_size(args)) if moe.shared_experts else None
        self.aux_loss = torch.zeros(())
        self.data_parallel_group = _NO_GROUP_GIVEN
        self.step_expert_load: torch.Tensor | None = None  # global_aux_loss: loads summed over the step's micro-batches
        self.step_micro_batches = 0

    def train(self, mode: bool = True) -> "MoE":
        # the trainer switches the model to training at the start of every step: the global batch starts over here,
        # as megatron-core resets its count after each step's gradients (reset_model_temporary_tensors)
        self.step_expert_load, self.step_micro_batches = None, 0
        return super().train(mode)

    def _route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        scores = router_scores(logits, self.score_function)
        selection = scores + self.expert_bias if self.expert_bias is not None else scores
        if self.num_groups > 1:  # keep only the best groups of experts per token (device-limited routing)
            grouped = selection.view(-1, self.num_groups, self.num_experts // self.num_groups)
            group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)
            keep = torch.zeros_like(group_scores).scatter_(1, group_scores.topk(self.group_topk, dim=-1).indices, 1.0)
            selection = (grouped * keep.unsqueeze(-1)).view(-1, self.num_experts).masked_fill(
                keep.repeat_interleave(self.num_experts // self.num_groups, dim=1) == 0, float("-inf")
            )
        indices = selection.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, indices)
        if self.norm_topk_prob and self.top_k > 1:
            weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-20)
        return weights * self.scaling, indices, scores

    def _balancing_loss(self, scores: torch.Tensor, indices: torch.Tensor, logits: torch.Tensor, batch: int) -> torch.Tensor:
        """aux_loss: E * sum_e(fraction routed to e * mean probability of e) over the batch (Switch/GShard);
        seq_aux_loss: the same per sequence, then averaged (DeepSeek-V3); global_aux_loss: the fractions of the
        global batch (every data-parallel rank's tokens), times this rank's share of the mean probabilities."""
        loss = logits.new_zeros(())
        if self.balancing != "none" and self.aux_loss_coeff > 0:
            routed = F.one_hot(indices, self.num_experts).float().sum(1)
            probs = scores / scores.sum(-1, keepdim=True)
            if self.balancing == "global_aux_loss":
                load, tokens = self._global_expert_load(routed.sum(0)), routed.shape[0] * self._data_parallel_size()
                balance = (load / (self.top_k * tokens) * probs.sum(0) / tokens).sum()
            else:
                groups = batch if self.balancing == "seq_aux_loss" else 1
                routed, probs = routed.view(groups, -1, self.num_experts), probs.view(groups, -1, self.num_experts)
                balance = (routed.mean(1) / self.top_k * probs.mean(1)).sum(-1).mean()
            loss = loss + self.aux_loss_coeff * self.num_experts * balance
        if self.z_loss_coeff > 0:
            loss = loss + self.z_loss_coeff * torch.logsumexp(logits, dim=-1).pow(2).mean()
        return loss

    def _data_parallel_size(self) -> int:
        if not dist.is_initialized() or dist.get_world_size() == 1 or self.data_parallel_group is _ALONE:
            return 1
        if self.data_parallel_group is _NO_GROUP_GIVEN:
            raise PrimusError("model.moe.load_balancing_type=global_aux_loss: this MoE layer was not told its "
                              "data-parallel group (moe.balance_over_data_parallel); use aux_loss or seq_aux_loss")
        return dist.get_world_size(self.data_parallel_group)

    def _global_expert_load(self, local_load: torch.Tensor) -> torch.Tensor:
        """Tokens routed to each expert in the global micro-batch, averaged over the step's micro-batches so far."""
        load = local_load.detach().clone()
        if self._data_parallel_size() > 1:
            dist.all_reduce(load, group=self.data_parallel_group)
        self.step_expert_load = load if self.step_expert_load is None else self.step_expert_load + load
        self.step_micro_batches += 1
        return self.step_expert_load / self.step_micro_batches

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        logits = self.router(tokens).float()
        weights, indices, scores = self._route(logits)
        self.aux_loss = self._balancing_loss(scores, indices, logits, shape[0]) if self.training else logits.new_zeros(())
        out = torch.zeros_like(tokens)
        for expert in range(self.num_experts):
            token_idx, slot = (indices == expert).nonzero(as_tuple=True)
            if token_idx.numel() == 0:
                continue
            chosen, weight = tokens[token_idx], weights[token_idx, slot, None].to(tokens.dtype)
            if self.score_before_experts:
                chosen = chosen * weight
            hidden = F.silu(chosen @ self.w1[expert].t()) * (chosen @ self.w3[expert].t())
            expert_out = hidden @ self.w2[expert].t()
            if not self.score_before_experts:
                expert_out = expert_out * weight
            out.index_add_(0, token_idx, expert_out.to(out.dtype))
        if self.expert_bias is not None and self.training and self.bias_update_rate > 0:
            with torch.no_grad():  # push under-loaded experts up, over-loaded down
                load = torch.bincount(indices.flatten(), minlength=self.num_experts).float()
                self.expert_bias += self.bias_update_rate * torch.sign(load.mean() - load)
        if self.shared is not None:
            out = out + self.shared(tokens)
        return out.view(shape)


def balance_over_data_parallel(model: nn.Module, group, data_parallel_size: int) -> None:
    """global_aux_loss counts the experts' loads over `group`: the ranks that see other tokens of the global batch
    (the data-parallel group; None: the default group). With data_parallel_size 1 nothing is summed (the other
    ranks, of tp or pp, see the same tokens or none)."""
    for module in model.modules():
        if isinstance(module, MoE):
            module.data_parallel_group = group if data_parallel_size > 1 else _ALONE
