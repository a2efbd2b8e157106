"""SGLang general plugin (entry point group `sglang.srt.plugins`, name `moe_serve`).

SGLang calls `load()` in its main process before server arguments are post-processed and as the first step of each
scheduler process. It first checks every SGLang name moe-serve touches against the installed SGLang
(touchpoints.py) and stops the engine with a message naming what moved. Then, on every device:

1. registers moe-serve's speculative algorithms MOE_SERVE_NGRAM and MOE_SERVE_STANDALONE (algorithm.py): the
   per-request speculative step runs in their workers;
2. hooks MoE routing (expert_budget.topk_hook) so verify forwards can be kept inside an expert budget and their
   experts counted;
3. carries each request's speculation summary (request_stats.py) into its response (stats_output.py).

It also has an idle scheduler keep receiving while a burst of requests is still arriving, so that the burst is
prefilled together instead of its first request alone (arrival_gather.py; setting `arrival_gather_ms=0` keeps SGLang's
receiving).

On the CPU engine (`SGLANG_USE_CPU_ENGINE=1`) it also:

4. registers torch implementations of the `sgl_kernel::*_cpu` ops that SGLang's `intel_amx` attention backend and
   speculative helpers call (`service.kernels.sgl_cpu_ops`); no PyPI wheel ships them for CPU. Must happen before
   the model runner is built: the backend looks the attention ops up in its constructor. The attention ops attend
   over the whole batch per layer with torch's fused attention kernel (settings `cpu_attention=batched` / `loop`:
   plain torch ops, for comparisons; settings.py);
5. registers the ragged-verify-aware subclass of that backend under its own name (cpu_attention.py);
6. tells SGLang the platform has AMX (`override_platform(has_amx=True)`), so its argument post-processing keeps the
   `intel_amx` backend instead of silently rewriting it to `torch_native` (which rejects target-verify batches). Only
   the platform fact changes: SGLang's module-level weight-packing switch (`cpu_has_amx_support()`) stays off because
   `sgl_kernel::convert_weight_packed` is not registered, so weights stay unpacked and no packed GEMM/MoE op is needed;
7. runs SGLang's CPU MoE forward with each expert's products in the form the CPU runs fastest for their few rows,
   tuned on the weights at the first forward, our stream kernel's walks among the forms (cpu_moe.py), and the dense
   layers' and lm_head's products at up to 8 rows the same way (cpu_dense.py; setting `cpu_gemm=experts` leaves
   the dense products to SGLang, `cpu_gemm=lockstep` keeps the kernel's first walk only for the experts,
   `cpu_gemm=torch` leaves the kernel out, `cpu_gemm=walks` leaves its AMX forms out, `cpu_gemm=linear` keeps
   SGLang's, `cpu_gemm=unfused` multiplies the experts one by one from Python); the forms timed once per machine and kept on disk for later engines
   (service/kernels/plan_cache.py; setting `gemm_plan=tune` times them at every start);
8. rotates queries and keys (NeoX rope) with tables made once per step, bit-identical to SGLang's (cpu_rope.py);
9. replaces Qwen2-MoE's shared-expert gate (a Triton kernel with no CPU branch) with its torch version;
10. makes sampled speculative verification lossless on CPU (sampled_verify.py);
11. registers SGLang's MixtralForCausalLM subclassed so that its decode and verify forwards run the arithmetic directly
    over the KV pool, without SGLang's model stack, its MoE sublayers without the TopK / FusedMoE modules' dispatch,
    a decode's attention sublayers and the MoE sublayers of decodes and verifies each one C++ call (target_forward.py,
    inline_moe.py, service/kernels/decode_attention.py, decode_moe.py; setting `target_forward=torch-ops` keeps those
    sublayers as torch ops,
    `target_forward=modules` the modules, `target_forward=sglang` SGLang's forward);
12. forks SGLang's scheduler and detokenizer processes from the launcher instead of spawning them, so they do not
    import SGLang and load this plugin a second time (process_start.py; setting `process_start=spawn` keeps SGLang's).

SGLang logs and swallows plugin exceptions, so failures are also recorded in `PluginState`; an incompatible SGLang
raises SystemExit, which SGLang does not swallow.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from moe_sglang.request_stats import RequestStatsBook

logger = logging.getLogger(__name__)


@dataclass
class PluginState:
    loaded: bool = False  # load() ran to the end in this process
    algorithms: list[str] = field(default_factory=list)  # speculative algorithms registered in this process
    cpu_ops: list[str] = field(default_factory=list)  # sgl_kernel ops registered by us in this process
    platform_override: bool = False  # has_amx overridden in this process
    sampled_verify: list[str] = field(default_factory=list)  # eagle_utils names given torch versions
    # per-request speculation counts of this process: fed by the speculative step, read by the output streamer
    request_stats: RequestStatsBook = field(default_factory=RequestStatsBook)


STATE = PluginState()  # per process by nature: SGLang loads plugins once per process


def cpu_engine() -> bool:
    return os.environ.get("SGLANG_USE_CPU_ENGINE", "0") == "1"


def load() -> None:
    from moe_sglang import algorithm, arrival_gather, expert_budget, stats_output
    from moe_sglang.settings import EngineSettings
    from moe_sglang.touchpoints import check_touchpoints, hook

    check_touchpoints()
    STATE.algorithms = algorithm.register()
    for target in expert_budget.TOPK_TARGETS:
        hook(target, expert_budget.topk_hook, "around")
    stats_output.install(STATE.request_stats)
    gather_ms = EngineSettings.from_env().arrival_gather_ms
    if gather_ms > 0:
        arrival_gather.install(gather_ms)
    if cpu_engine():
        _load_cpu()
    STATE.loaded = True
    logger.info("moe-serve plugin loaded (cpu=%s, ops=%d)", cpu_engine(), len(STATE.cpu_ops))


def _load_cpu() -> None:
    from sglang.srt.runtime_context import override_platform

    from moe_sglang import cpu_attention, cpu_dense, cpu_moe, cpu_rope, process_start, sampled_verify, target_forward
    from moe_sglang.settings import PLANNED_DENSE, EngineSettings
    from moe_sglang.touchpoints import hook
    from service.kernels import shared_expert_gate
    from service.kernels.plan_cache import PlanCache, set_engine_cache
    from service.kernels.sgl_cpu_ops import register_sgl_kernel_cpu_ops

    settings = EngineSettings.from_env()
    set_engine_cache(PlanCache() if settings.gemm_plan == "cached" else None)
    STATE.cpu_ops = register_sgl_kernel_cpu_ops("sgl_kernel", attention=settings.cpu_attention)
    cpu_attention.register()
    if settings.cpu_gemm != "linear":
        cpu_moe.install(settings.cpu_gemm, settings.expert_weights)
    if settings.cpu_gemm in PLANNED_DENSE:
        cpu_dense.install()
    cpu_rope.install()
    if settings.target_forward != "sglang":
        planned = settings.cpu_gemm in PLANNED_DENSE
        dense = cpu_dense.product if planned else None
        kinds = None if settings.target_forward == "torch-ops" else cpu_dense.kinds if planned else _linear_kinds
        # the LM head read as bfloat16 with the experts (expert_weights=bf16-exact), by the stream forms (planned)
        narrow = planned and settings.expert_weights == "bf16-exact"
        target_forward.install(
            dense, inline_moe=settings.target_forward in ("direct", "torch-ops"), kinds=kinds, narrow=narrow
        )
    for target, name in _TRITON_ONLY.items():
        hook(target, getattr(shared_expert_gate, name), "replace")
    STATE.sampled_verify = sampled_verify.install()
    if settings.process_start == "fork":
        process_start.install()
    if not STATE.platform_override:
        override_platform(has_amx=True).install()
        STATE.platform_override = True


def _linear_kinds(weight) -> list[int]:
    """No planned forms (the dense products are torch's F.linear): the decode attention op multiplies as F.linear."""
    return []


# SGLang functions that exist only as Triton kernels, replaced on CPU by their torch versions. The targets are the
# names as the model modules imported them (a module-level `from ... import`), which is what their code calls.
_TRITON_ONLY = {
    "sglang.srt.models.qwen2_moe.fused_gate_sigmoid_mul": "gate_sigmoid_mul",
    "sglang.srt.models.qwen2_moe.fused_gate_sigmoid_mul_add": "gate_sigmoid_mul_add",
}
