"""The CPU engine's MoE forward: SGLang's `moe_forward_native` with each expert's two products in the form the
CPU runs fastest for its few rows (service/kernels/small_gemm.py).

Without packed AMX weights (plugin.py, point 6) SGLang's `UnquantizedFusedMoEMethod.forward_cpu` runs
`moe_forward_native`: tokens sorted by expert, then per expert hit `F.linear` for gate/up, the activation, `F.linear`
for down. A decode step gives each expert 1-2 rows and a verify 2-5; at those sizes `F.linear` lands in BLAS routines
that read the weight at half the speed another form of the same product does (small_gemm's table), and the expert
products are most of a step on a memory-bound MoE. The first forward tunes a `GemmPlan` on the layer's own weights
(every form timed, per row count: torch's two and our stream kernel, which reads the weight once at any row count);
every later one multiplies in the planned form (small_gemm.moe_experts: the
sorting and combine are SGLang's, the whole layer's experts in one call of the stream kernel's library where it is
loaded); anything this path does not cover (biases, GPT-OSS's clamped SwiGLU, router
weights on the input) goes to SGLang's function unchanged.

Why a hook (touchpoints.py): SGLang has no registry for the CPU MoE kernel; `forward_cpu` imports
`moe_forward_native` from its module at each call, so replacing that module attribute is the one seam.
Setting `cpu_gemm=lockstep` (settings.py) tunes the stream kernel's first walk only, `cpu_gemm=torch` torch's forms
only and expert by expert from Python, `cpu_gemm=unfused` the tuned forms expert by expert from Python,
`cpu_gemm=linear` leaves SGLang's function in place, for comparisons.
"""

from __future__ import annotations

import logging

import torch

from service.kernels.small_gemm import FORMS, STREAM_FORMS, GemmPlan, moe_experts, moe_experts_python

logger = logging.getLogger(__name__)

TARGET = "sglang.srt.layers.moe.fused_moe_native.moe_forward_native"
PLAN = GemmPlan()  # per process: tuned on the first forward of each expert shape
_ORIGINAL: list = []  # SGLang's function, for the cases this path leaves to it


# the forms each setting of cpu_gemm tunes (settings.CPU_GEMM; `linear` does not install this path)
CANDIDATES = {
    "tuned": FORMS,
    "experts": FORMS,
    "lockstep": tuple(f for f in FORMS if f not in STREAM_FORMS[1:]),
    "torch": tuple(f for f in FORMS if f not in STREAM_FORMS),
    "unfused": FORMS,
}
PYTHON_LOOP = ("torch", "unfused")  # the settings whose experts are multiplied one by one from Python
_EXPERTS: list = [moe_experts]  # the expert forward install() chose


def install(gemm: str = "tuned") -> None:
    """Replace SGLang's CPU MoE forward, its products tuned over the forms of `gemm` (CANDIDATES)."""
    from sglang.srt.layers.moe import fused_moe_native

    from moe_sglang.touchpoints import hook

    PLAN.candidates = CANDIDATES[gemm]
    _EXPERTS[0] = moe_experts_python if gemm in PYTHON_LOOP else moe_experts
    if not _ORIGINAL:
        _ORIGINAL.append(fused_moe_native.moe_forward_native)
    hook(TARGET, moe_forward, "replace")


def moe_forward(layer: torch.nn.Module, x: torch.Tensor, topk_output, moe_runner_config) -> torch.Tensor:
    """`moe_forward_native(layer, x, topk_output, moe_runner_config)` with planned expert products."""
    if not _covered(layer, moe_runner_config):
        return _ORIGINAL[0](layer, x, topk_output, moe_runner_config)
    w13, w2 = layer.w13_weight, layer.w2_weight
    if (w13.shape[1], w13.shape[2], 1) not in PLAN.forms or (w2.shape[1], w2.shape[2], 1) not in PLAN.forms:
        PLAN.tune([w13.detach(), w2.detach()])
        logger.info(
            "moe-serve CPU expert products: %s (read from the plan cache: %s)", PLAN.describe(), sorted(PLAN.cached)
        )
    topk_weights, topk_ids, _ = topk_output
    return _EXPERTS[0](PLAN, x, w13, w2, topk_ids, topk_weights)


def stream_kinds(layer: torch.nn.Module, moe_runner_config) -> tuple[list[int], list[int]] | None:
    """(kinds13, kinds2): the forms `moe_forward` multiplies the layer's experts in when it would run them in one
    stream_moe call (installed with the library's expert forward, the layer covered and its shapes tuned), for ops
    that run the same expert forward in C++ (service/kernels/decode_moe.py); None otherwise (the first forward of a
    shape tunes it)."""
    if not _ORIGINAL or _EXPERTS[0] is not moe_experts or not _covered(layer, moe_runner_config):
        return None
    w13, w2 = layer.w13_weight, layer.w2_weight
    if (w13.shape[1], w13.shape[2], 1) not in PLAN.forms or (w2.shape[1], w2.shape[2], 1) not in PLAN.forms:
        return None
    return PLAN.kinds(w13.shape[1], w13.shape[2]), PLAN.kinds(w2.shape[1], w2.shape[2])


def _covered(layer, config) -> bool:
    """Float32 experts with SiLU gating (Mixtral, Qwen2-MoE, OLMoE), no biases, no clamped SwiGLU, router weights
    applied after."""
    return (
        config.activation == "silu"
        and config.gemm1_alpha is None
        and not config.apply_router_weight_on_input
        and getattr(layer, "w13_weight_bias", None) is None
        and getattr(layer, "w2_weight_bias", None) is None
        and layer.w13_weight.dtype == torch.float32
        and layer.w13_weight.dim() == 3
    )
