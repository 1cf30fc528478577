"""Mixture of experts with top-k routing (Mixtral: softmax; DeepSeek-V3: sigmoid, group-limited, bias-balanced).

Experts are stored as stacked weights (experts, ...) so that even DeepSeek-V3 builds quickly on the meta device.
Dispatch is a plain loop over experts: clear and exact, which is what a CPU reference needs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from primus_hydra.backends.torch.layers import FeedForward
from primus_hydra.config.model_math import shared_expert_ffn_hidden_size


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
        f = moe.ffn_hidden_size
        self.w1 = nn.Parameter(torch.empty(self.num_experts, f, h))
        self.w3 = nn.Parameter(torch.empty(self.num_experts, f, h))
        self.w2 = nn.Parameter(torch.empty(self.num_experts, h, f))
        self.shared = FeedForward(h, shared_expert_ffn_hidden_size(args)) if moe.shared_experts else None
        self.aux_loss = torch.zeros(())

    def _route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        scores = logits.sigmoid() if self.score_function == "sigmoid" else logits.softmax(dim=-1)
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
        seq_aux_loss: the same per sequence, then averaged (DeepSeek-V3)."""
        loss = logits.new_zeros(())
        if self.balancing != "none" and self.aux_loss_coeff > 0:
            groups = batch if self.balancing == "seq_aux_loss" else 1
            routed = F.one_hot(indices, self.num_experts).float().sum(1).view(groups, -1, self.num_experts)
            probs = (scores / scores.sum(-1, keepdim=True)).view(groups, -1, self.num_experts)
            balance = (routed.mean(1) / self.top_k * probs.mean(1)).sum(-1).mean()
            loss = loss + self.aux_loss_coeff * self.num_experts * balance
        if self.z_loss_coeff > 0:
            loss = loss + self.z_loss_coeff * torch.logsumexp(logits, dim=-1).pow(2).mean()
        return loss

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
            chosen = tokens[token_idx]
            hidden = F.silu(chosen @ self.w1[expert].t()) * (chosen @ self.w3[expert].t())
            expert_out = (hidden @ self.w2[expert].t()) * weights[token_idx, slot, None].to(chosen.dtype)
            out.index_add_(0, token_idx, expert_out.to(out.dtype))
        if self.expert_bias is not None and self.training and self.bias_update_rate > 0:
            with torch.no_grad():  # push under-loaded experts up, over-loaded down
                load = torch.bincount(indices.flatten(), minlength=self.num_experts).float()
                self.expert_bias += self.bias_update_rate * torch.sign(load.mean() - load)
        if self.shared is not None:
            out = out + self.shared(tokens)
        return out.view(shape)
