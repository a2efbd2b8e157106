"""SGLang general plugin (entry point group `sglang.srt.plugins`, name `moe_serve`).

SGLang calls `load()` in its main process before server arguments are post-processed and as the first step of each
scheduler process. On the CPU engine (`SGLANG_USE_CPU_ENGINE=1`) it:

1. registers torch implementations of the `sgl_kernel::*_cpu` ops that SGLang's `intel_amx` attention backend and
   speculative-decoding helpers call (`service.kernels.sgl_cpu_ops`); no PyPI wheel ships them for CPU. Must happen
   before the model runner is built: the backend looks the attention ops up in its constructor.
2. tells SGLang the platform has AMX (`override_platform(has_amx=True)`), so its argument post-processing keeps the
   `intel_amx` backend instead of silently rewriting it to `torch_native` (which rejects target-verify batches). Only
   the platform fact changes: SGLang's module-level weight-packing switch (`cpu_has_amx_support()`) stays off because
   `sgl_kernel::convert_weight_packed` is not registered, so weights stay unpacked and no packed GEMM/MoE op is needed.
3. replaces Qwen2-MoE's shared-expert gate (a Triton kernel with no CPU branch) with its torch version.
4. makes sampled speculative verification lossless on CPU (see sampled_verify.py).

On every device it installs the per-request speculation hooks (spec_hooks.py: policies, K_i per request, expert
budget in verify, step stats and metrics; issue 8). Otherwise on CUDA machines it does nothing: SGLang's own kernels and FlashInfer are used. SGLang logs and swallows plugin
exceptions, so failures are also recorded in `PluginState` and re-raised where our launcher checks them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass
class PluginState:
    loaded: bool = False  # load() ran to the end in this process
    cpu_ops: list[str] = field(default_factory=list)  # sgl_kernel ops registered by us in this process
    platform_override: bool = False  # has_amx overridden in this process
    sampled_verify: list[str] = field(default_factory=list)  # eagle_utils names given torch versions
    spec_hooks: list[str] = field(default_factory=list)  # SGLang targets wrapped for per-request speculation
    runtime: object | None = None  # spec_step.SpecRuntime of this process


STATE = PluginState()  # per process by nature: SGLang loads plugins once per process


def cpu_engine() -> bool:
    return os.environ.get("SGLANG_USE_CPU_ENGINE", "0") == "1"


def load() -> None:
    from moe_sglang.compat import check_sglang

    check_sglang()
    if cpu_engine():
        _load_cpu()
    _load_spec_hooks()
    STATE.loaded = True
    logger.info(
        "moe-serve plugin loaded (cpu=%s, ops=%d, spec hooks=%d)",
        cpu_engine(),
        len(STATE.cpu_ops),
        len(STATE.spec_hooks),
    )


def _load_cpu() -> None:
    from sglang.srt.runtime_context import override_platform

    from moe_sglang import sampled_verify
    from service.kernels.sgl_cpu_ops import register_sgl_kernel_cpu_ops

    STATE.cpu_ops = register_sgl_kernel_cpu_ops("sgl_kernel")
    _replace_triton_only_functions()
    STATE.sampled_verify = sampled_verify.install()
    if not STATE.platform_override:
        override_platform(has_amx=True).install()
        STATE.platform_override = True


def _load_spec_hooks() -> None:
    from moe_sglang import spec_hooks, stats_output
    from moe_sglang.hints import NO_HINT_POLICY_ENV, NO_POLICY
    from moe_sglang.spec_step import SpecRuntime

    if STATE.runtime is None:
        STATE.runtime = SpecRuntime(
            budget_mode=spec_hooks.budget_mode_from_env(),
            no_hint_policy=os.environ.get(NO_HINT_POLICY_ENV) or NO_POLICY,
        )
        STATE.spec_hooks = spec_hooks.install(STATE.runtime)
        STATE.spec_hooks += stats_output.install(STATE.runtime.request_stats)


# SGLang functions that exist only as Triton kernels, replaced on CPU by their torch versions. The targets are the
# names as the model modules imported them (a module-level `from ... import`), which is what their code calls.
_TRITON_ONLY = {
    "sglang.srt.models.qwen2_moe.fused_gate_sigmoid_mul": "gate_sigmoid_mul",
    "sglang.srt.models.qwen2_moe.fused_gate_sigmoid_mul_add": "gate_sigmoid_mul_add",
}


def _replace_triton_only_functions() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from service.kernels import shared_expert_gate

    for target, name in _TRITON_ONLY.items():
        HookRegistry.register(target, getattr(shared_expert_gate, name), HookType.REPLACE)
