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

Expert weights a checkpoint stores as bfloat16 are loaded by SGLang widened to float32 (the engine's dtype), which
doubles the bytes every decode and verify step reads for values bfloat16 holds exactly. Where every value of a layer's
w13 and w2 is a bfloat16 (checked at the layer's first forward), they are kept as bfloat16 (setting
`expert_weights=bf16-exact`, the default) and the stream kernel widens each one back to the same float32 in registers
before multiplying: the products are the float32 model's bit for bit where the plan's walks run (up to 16 rows per
expert hit), to summation order past them (up to 32 rows the walks over pieces of 16 rows, beyond F.linear on a widened
copy; where the plan gives 16 rows an AMX tile form, the tiles at every row count: a prefill's experts read once and
multiplied 1.8-2.6x faster than by F.linear, csrc/stream_gemm.cpp). `expert_weights=float32` keeps
SGLang's float32 copy (comparisons; also every checkpoint whose experts are not bfloat16 values).

Why a hook (touchpoints.py): SGLang has no registry for the CPU MoE kernel; `forward_cpu` imports
`moe_forward_native` from its module at each call, so replacing that module attribute is the one seam.
Setting `cpu_gemm=walks` (settings.py) leaves the kernel's AMX forms out of the plan, `cpu_gemm=lockstep` tunes the
stream kernel's first walk only, `cpu_gemm=torch` torch's forms only and expert by expert from Python,
`cpu_gemm=unfused` the tuned forms expert by expert from Python, `cpu_gemm=linear` leaves SGLang's function in place,
for comparisons.
"""

from __future__ import annotations

import logging

import torch

from service.kernels import stream_gemm
from service.kernels.small_gemm import AMX_FORMS, FORMS, STREAM_FORMS, GemmPlan, moe_experts, moe_experts_python

logger = logging.getLogger(__name__)

TARGET = "sglang.srt.layers.moe.fused_moe_native.moe_forward_native"
PLAN = GemmPlan()  # per process: tuned on the first forward of each expert shape
_ORIGINAL: list = []  # SGLang's function, for the cases this path leaves to it


# the forms each setting of cpu_gemm tunes (settings.CPU_GEMM; `linear` does not install this path)
CANDIDATES = {
    "tuned": FORMS,
    "walks": tuple(f for f in FORMS if f not in AMX_FORMS),
    "experts": FORMS,
    "lockstep": tuple(f for f in FORMS if f not in STREAM_FORMS[1:]),
    "torch": tuple(f for f in FORMS if f not in STREAM_FORMS),
    "unfused": FORMS,
}
PYTHON_LOOP = ("torch", "unfused")  # the settings whose experts are multiplied one by one from Python
_EXPERTS: list = [moe_experts]  # the expert forward install() chose
# the settings whose expert forward can read bfloat16 weights (the stream kernel's library: stream_moe)
BF16_READERS = ("tuned", "walks", "experts", "lockstep")
_KEEP_BF16: list[bool] = [False]  # install()'s: keep bfloat16-exact expert weights as bfloat16
# what _store marks on a layer (our names on SGLang's FusedMoE module): its weights looked at; kept as bfloat16
_SEEN, _STORED = "_moe_serve_weights_seen", "_moe_serve_weights_bf16"


def install(gemm: str = "tuned", expert_weights: str = "bf16-exact") -> None:
    """Replace SGLang's CPU MoE forward, its products tuned over the forms of `gemm` (CANDIDATES); with
    `expert_weights=bf16-exact` a layer's expert weights that are all bfloat16 values are kept as bfloat16 where the
    expert forward reads them so (BF16_READERS, the stream kernel's library loaded)."""
    from sglang.srt.layers.moe import fused_moe_native

    from moe_sglang.touchpoints import hook

    PLAN.candidates = CANDIDATES[gemm]
    _EXPERTS[0] = moe_experts_python if gemm in PYTHON_LOOP else moe_experts
    _KEEP_BF16[0] = expert_weights == "bf16-exact" and gemm in BF16_READERS and stream_gemm.load()
    if not _ORIGINAL:
        _ORIGINAL.append(fused_moe_native.moe_forward_native)
    hook(TARGET, moe_forward, "replace")


def moe_forward(layer: torch.nn.Module, x: torch.Tensor, topk_output, moe_runner_config) -> torch.Tensor:
    """`moe_forward_native(layer, x, topk_output, moe_runner_config)` with planned expert products."""
    if not getattr(layer, _SEEN, False):
        _store(layer, moe_runner_config)
    if not _covered(layer, moe_runner_config):
        return _ORIGINAL[0](layer, x, topk_output, moe_runner_config)
    w13, w2 = layer.w13_weight, layer.w2_weight
    if (w13.shape[1], w13.shape[2], 1) not in PLAN.forms or (w2.shape[1], w2.shape[2], 1) not in PLAN.forms:
        PLAN.tune([w13.detach(), w2.detach()], inputs=x.dtype)
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
    if not getattr(layer, _SEEN, False):  # a layer of a tuned shape the MoE forward has not run yet
        _store(layer, moe_runner_config)
    w13, w2 = layer.w13_weight, layer.w2_weight
    if (w13.shape[1], w13.shape[2], 1) not in PLAN.forms or (w2.shape[1], w2.shape[2], 1) not in PLAN.forms:
        return None
    return PLAN.kinds(w13.shape[1], w13.shape[2]), PLAN.kinds(w2.shape[1], w2.shape[2])


def _covered(layer, config) -> bool:
    """Float32 experts (or bfloat16 ones this module stored so, `_store`) with SiLU gating (Mixtral, Qwen2-MoE,
    OLMoE), no biases, no clamped SwiGLU, router weights applied after."""
    return (
        config.activation == "silu"
        and config.gemm1_alpha is None
        and not config.apply_router_weight_on_input
        and getattr(layer, "w13_weight_bias", None) is None
        and getattr(layer, "w2_weight_bias", None) is None
        and (layer.w13_weight.dtype == torch.float32 or getattr(layer, _STORED, False))
        and layer.w13_weight.dim() == 3
    )


def _store(layer, config) -> None:
    """At a layer's first forward: where it is covered, bfloat16 storage is on (install) and every value of its w13
    and w2 is exactly a bfloat16, keep them as bfloat16 (the parameters' data replaced; SGLang's float32 copy freed)."""
    setattr(layer, _SEEN, True)
    if not (_KEEP_BF16[0] and _covered(layer, config)):
        return
    w13, w2 = layer.w13_weight, layer.w2_weight
    if w2.dtype != torch.float32:
        return
    narrow = [exact_bf16(w13.detach()), exact_bf16(w2.detach())]
    if any(n is None for n in narrow):
        return
    w13.data, w2.data = narrow
    setattr(layer, _STORED, True)
    logger.info("moe-serve CPU experts: a layer's w13 %s and w2 %s kept as bfloat16 (every value exact)",
                tuple(w13.shape), tuple(w2.shape))  # fmt: skip


def exact_bf16(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` (float32) as bfloat16 where that is exact for every value (each widens back to the same float32),
    else None. 4096 rows at a time, so the check's float32 copy stays small."""
    out = torch.empty(weight.shape, dtype=torch.bfloat16)
    rows_out, rows_in = out.view(-1, weight.shape[-1]), weight.reshape(-1, weight.shape[-1])
    for start in range(0, rows_in.shape[0], 4096):
        narrow = rows_in[start : start + 4096].to(torch.bfloat16)
        if not torch.equal(narrow.to(torch.float32), rows_in[start : start + 4096]):
            return None
        rows_out[start : start + 4096] = narrow
    return out
