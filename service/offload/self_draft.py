"""MoE-SpeQ's INT4 self-draft experts (issue 10 part 1): the target's experts quantized INT4, group 128, symmetric.

Only the expert weights change; attention, norms, embeddings and the router gates are the target's own tensors (the
draft is the same module run in draft mode, offloaded_experts.py), so the draft routes with the exact FP gates the
paper keeps (§3.4). The INT4 experts are small enough to stay resident, so drafting never touches the slow tier.
The packed layout is service/kernels/int4.py's, and the matmuls go through the kernel dispatch (Triton on GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from service.kernels import dispatch
from service.kernels.int4 import GROUP_SIZE, quantize_int4


@dataclass(frozen=True)
class Int4Experts:
    """One MoE layer's experts in INT4."""

    gate_up: torch.Tensor  # [E, 2I, H/2] uint8, two codes per byte
    gate_up_scales: torch.Tensor  # [E, 2I, H/group] float32
    down: torch.Tensor  # [E, H, I/2] uint8
    down_scales: torch.Tensor  # [E, H, I/group] float32
    group_size: int  # input features per scale

    @classmethod
    def quantize(cls, gate_up: torch.Tensor, down: torch.Tensor, group_size: int = GROUP_SIZE) -> Int4Experts:
        """From the fused in-memory layout `gate_up [E, 2I, H]`, `down [E, H, I]`."""
        packed_gu, scales_gu = quantize_int4(gate_up.detach(), group_size)
        packed_d, scales_d = quantize_int4(down.detach(), group_size)
        return cls(packed_gu, scales_gu, packed_d, scales_d, group_size)

    def forward(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        """`x [n, H]` through expert `expert` → `[n, H]`: down(silu(gate x) * up x)."""
        gate_up = dispatch.int4_matmul(x, self.gate_up[expert], self.gate_up_scales[expert], self.group_size)  # [n, 2I]
        gate, up = gate_up.chunk(2, dim=-1)
        return dispatch.int4_matmul(F.silu(gate) * up, self.down[expert], self.down_scales[expert], self.group_size)

    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for t in (self.gate_up, self.gate_up_scales, self.down, self.down_scales)
        )
