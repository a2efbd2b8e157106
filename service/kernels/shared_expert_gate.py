"""Qwen2-MoE's gated shared expert: out = sigmoid(h · w) * s, per token (the gate is a single linear unit).

SGLang computes this with a Triton kernel that has no CPU branch; these are the torch versions used on CPU.
The gate is computed in fp32 like the kernel does, then cast back to the shared output's dtype.
"""

from __future__ import annotations

import torch


def gate_sigmoid_mul(
    hidden_states: torch.Tensor, gate_weight: torch.Tensor, shared_output: torch.Tensor
) -> torch.Tensor:
    # hidden_states [T, H], gate_weight [H], shared_output [T, H] -> [T, H]
    gate = torch.sigmoid(hidden_states.float() @ gate_weight.float())  # [T]
    return (gate[:, None] * shared_output.float()).to(shared_output.dtype)


def gate_sigmoid_mul_add(
    hidden_states: torch.Tensor, gate_weight: torch.Tensor, shared_output: torch.Tensor, out: torch.Tensor
) -> None:
    # out [T, H] += sigmoid(hidden_states · gate_weight) * shared_output, in place
    gate = torch.sigmoid(hidden_states.float() @ gate_weight.float())  # [T]
    out.copy_((out.float() + gate[:, None] * shared_output.float()).to(out.dtype))
