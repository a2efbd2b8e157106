"""The CPU engine's dense products at a decode's or verify's few rows: SGLang's unquantized linear layers (attention
projections, the MoE router, shared experts) and its lm_head, each in the form the CPU runs fastest for those rows
(service/kernels/small_gemm.py's `GemmPlan`, tuned on the weight at its first product), as cpu_moe.py does for the
experts.

Why: at 1-16 rows these products are memory-bound, and torch's product reads a weight with short rows slowly: on the
2-core AMD EPYC of the twenty-seventh session a [9216, 256] weight at one row at ~8 GB/s, the stream kernel's
address-order walk at ~27 (stream_gemm.py). moe-fine's lm_head is such a weight ([8192, 256], 8 MB, read every
step), and the dense products took 2.2 ms of a 16 ms batch-1 decode of moe-fine x48 in that session's profile
(bench/results/step_profile_walks). Products the plan leaves to `linear`, more rows than it tunes, other dtypes,
biases, packed (AMX) weights, LoRA and quantised heads go to SGLang's code unchanged.

Why hooks (touchpoints.py): `UnquantizedLinearMethod.apply` picks its product by platform flags inside the method,
and `LogitsProcessor._compute_lm_head` calls `torch.matmul` itself; SGLang has no registry for either on CPU.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from service.kernels.small_gemm import FORMS, GemmPlan

logger = logging.getLogger(__name__)

LINEAR = "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply"
LM_HEAD = "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head"
# per process, tuned at the first product of each weight shape: up to 8 rows (a batch-8 decode, a batch-1 verify) and
# 3 timing passes, so the lm_head's tuning adds ~1 s at start (16 rows and 5 passes: ~4 s for moe-fine's 8 MB head)
PLAN = GemmPlan(max_rows=8)
REPEATS = 3


def install(candidates: tuple[str, ...] = FORMS) -> None:
    """Hook SGLang's dense products on CPU; the plan chooses among `candidates` (small_gemm.FORMS)."""
    from moe_sglang.touchpoints import hook

    PLAN.candidates = candidates
    hook(LINEAR, linear_apply, "around")
    hook(LM_HEAD, compute_lm_head, "around")


def linear_apply(original, method, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None):
    """AROUND hook of UnquantizedLinearMethod.apply: x @ layer.weight.T in the planned form."""
    weight = layer.weight
    if bias is not None or getattr(layer, "use_intel_amx_backend", False) or not _planned(x, weight):
        return original(method, layer, x, bias)
    return PLAN.mm(x, weight)


def compute_lm_head(original, processor, hidden_states, lm_head, embedding_bias=None, *, out=None):
    """AROUND hook of LogitsProcessor._compute_lm_head: the logits of SGLang's plain float path (no LoRA, no
    quantised head, no fp32 / AMX / RL branch) in the planned form."""
    weight = getattr(lm_head, "weight", None)
    plain = (
        weight is not None
        and not hasattr(lm_head, "set_lora")
        and type(getattr(lm_head, "quant_method", None)).__name__ in ("NoneType", "UnquantizedEmbeddingMethod")
        and not processor.use_fp32_lm_head
        and processor.rl_on_policy_target is None
        and not getattr(lm_head, "use_intel_amx_backend", False)
    )
    if not plain or not _planned(hidden_states, weight):
        return original(processor, hidden_states, lm_head, embedding_bias, out=out)
    return PLAN.mm(hidden_states, weight)


def product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T as the hooked dense layers multiply it: the planned form where one is planned, else F.linear (for
    the target model's direct forwards, target_forward.py, which call no linear layer)."""
    return PLAN.mm(x, weight) if _planned(x, weight) else F.linear(x, weight)


def _planned(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """A float32 CPU product of 1..max_rows rows whose planned form is not torch's own (tuned at its first call)."""
    if not (
        x.dim() == 2
        and weight.dim() == 2
        and x.dtype == weight.dtype == torch.float32
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        and 1 <= x.shape[0] <= PLAN.max_rows
        and x.shape[1] == weight.shape[1]
    ):
        return False
    _tuned(weight)
    return PLAN.form(weight.shape[0], weight.shape[1], x.shape[0]) != "linear"


def kinds(weight: torch.Tensor) -> list[int]:
    """The planned form of `x @ weight.T` per row count 1..PLAN.max_rows as stream_gemm's kinds (more rows: F.linear),
    for the ops that multiply in C++ (service/kernels/decode_attention.py); tuned at the first call, as `product`."""
    _tuned(weight)
    return PLAN.kinds(weight.shape[0], weight.shape[1])


def _tuned(weight: torch.Tensor) -> None:
    """Tune the forms of the weight's shape unless the plan has them."""
    if (weight.shape[0], weight.shape[1], 1) not in PLAN.forms:
        PLAN.tune([_copies(weight.detach())], repeats=REPEATS)
        logger.info(
            "moe-serve CPU dense products: %s (read from the plan cache: %s)", PLAN.describe(), sorted(PLAN.cached)
        )


def _copies(weight: torch.Tensor, budget_bytes: int = 256 << 20) -> torch.Tensor:
    """Up to 8 copies of `weight` (within `budget_bytes`), stacked: timed in turn, so the forms are timed on a
    weight that comes from memory rather than a cache, as in a step, where the expert weights stream through between
    two products of the same dense weight (timing the one matrix again and again, an 8 MB lm_head stays in cache)."""
    copies = max(1, min(8, budget_bytes // max(weight.numel() * weight.element_size(), 1)))
    return weight.unsqueeze(0).repeat(copies, 1, 1)
