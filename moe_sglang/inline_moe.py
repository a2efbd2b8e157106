"""The target's MoE sublayer in the direct forward (target_forward.py) without SGLang's module dispatch: the routing
arithmetic and the expert forward SGLang's TopK and FusedMoE modules call on the CPU engine, called directly.

Why: at a decode step's few rows the modules' dispatch costs more than their arithmetic. Timed in the engine (batch
1, moe-fine, AVX2 host): the TopK module ~175 us per layer of which the routing arithmetic is ~35 us (the rest:
resolving the routing inputs, select_experts' branches and environment reads, the post-processing, the
expert-budget hook's wrapper); the FusedMoE chain (dispatcher, quant method dispatch, combine) ~90 us per layer
around the expert products.

What it keeps of SGLang: the routing function its TopK reaches without AMX (with AMX the TopK module runs) (`forward_native` ->
`select_experts` -> `fused_topk_native`), the post-processing through SGLang's own helper for routers that compute
(weights, ids) themselves (`build_precomputed_topk_output`: the routed-experts capture and the expert-distribution
recorder), moe-serve's expert-budget / expert-counting scope (expert_budget.scoped, as the hook applies it), and
the CPU MoE function FusedMoE reaches (`moe_forward_native`, looked up at each call as SGLang's `forward_cpu` does:
cpu_moe.py's tuned one where installed). Taken only where SGLang's other work is a no-op, the conditions of
SGLang's `precomputed_topk_postprocess_is_noop` on the CPU branch of `_post_process_topk_ids` (no shared-expert
slots, no EPLB dispatch info, no padded-token count, no routing simulation) plus plain softmax top-k routing, no
Waterfill, a single expert-parallel rank, the standard dispatcher, no AMX-packed weights. `InlineMoE.of` checks what
is fixed for the process and says why not otherwise (the forward then calls the modules); `blocked` checks what SGLang
binds per forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moe_sglang.expert_budget import scoped


@dataclass(frozen=True)
class InlineMoE:
    topk: object  # the layer's TopK module: its config, layer id, draft flag
    experts: object  # the layer's FusedMoE module: its weights and the quant method's runner config
    route_inline: bool  # the routing arithmetic called directly (TopK dispatches to forward_native), else the module
    # routing is SGLang's fused_topk_torch_native (not the AMX alias fused_topk_cpu): what the decode MoE op
    # (service/kernels/decode_moe.py) reproduces
    torch_routing: bool = False

    @classmethod
    def of(cls, topk, experts) -> tuple[InlineMoE | None, str]:
        """The inline MoE of one layer, or (None, why SGLang's modules must run it)."""
        from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
        from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatcher
        from sglang.srt.layers.moe.topk import TopK
        from sglang.srt.layers.moe.utils import should_use_flashinfer_cutlass_moe_fp4_allgather
        from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod
        from sglang.srt.utils import use_intel_amx_backend

        if type(topk) is not TopK or topk.is_draft:
            return None, f"routing {type(topk).__name__} (draft: {topk.is_draft})"
        config = topk.topk_config
        plain = (
            not config.use_grouped_topk and config.custom_routing_function is None and config.correction_bias is None
        )
        if not plain or config.scoring_func != "softmax" or config.num_shared_topk_slots:
            return None, "routing other than softmax top-k without groups, bias or shared experts"
        if config.apply_routed_scaling_factor_on_output and config.routed_scaling_factor is not None:
            return None, "a routed scaling factor on the output"
        if topk.enable_waterfill or topk.waterfill_balancer is not None:
            return None, "Waterfill expert balancing"
        from sglang.srt.environ import envs

        if envs.SGLANG_SIMULATE_UNIFORM_EXPERTS.get() or envs.SGLANG_SIMULATE_ROUND_ROBIN_EXPERTS.get():
            return None, "simulated expert routing (SGLANG_SIMULATE_* in the environment)"
        method = experts.quant_method
        if type(experts) is not FusedMoE or not isinstance(method, UnquantizedFusedMoEMethod):
            return None, f"experts {type(experts).__name__} ({type(method).__name__})"
        if _dispatched(method) is not UnquantizedFusedMoEMethod.forward_cpu:
            return None, "experts dispatched to a platform kernel, not forward_cpu"
        if use_intel_amx_backend(experts) or experts._dwdp_bound or experts._use_ascend_fuseep:
            return None, "AMX-packed, prefetched or fused-EP experts"
        dispatcher = experts.dispatcher
        if type(dispatcher) is not StandardDispatcher or experts.moe_ep_size != 1:
            return None, f"dispatcher {type(dispatcher).__name__} over {experts.moe_ep_size} expert-parallel ranks"
        if dispatcher.local_expert_mapping is not None or should_use_flashinfer_cutlass_moe_fp4_allgather():
            return None, "a local expert mapping or an FP4 all-gather"
        # with AMX SGLang's TopK dispatches to forward_cpu (the sgl_kernel routing op): that module is kept
        native = _dispatched(topk) is TopK.forward_native
        from sglang.srt.layers.moe import topk as routing

        return cls(topk, experts, native, native and routing.fused_topk_native is routing.fused_topk_torch_native), ""

    def __call__(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        """The MoE sublayer's output [T, hidden] of the normed state x [T, hidden]."""
        from sglang.srt.layers.moe import fused_moe_native, topk

        if self.route_inline:
            config = self.topk.topk_config
            weights, ids = topk.fused_topk_native(x, router_logits, config.top_k, config.renormalize)
            routing = topk.build_precomputed_topk_output(weights, ids, config, self.topk.layer_id)
            routing = scoped(self.topk, routing, router_logits)
        else:
            routing = self.topk(x, router_logits)
        method = self.experts.quant_method
        return fused_moe_native.moe_forward_native(self.experts, x, routing, method.moe_runner_config)


def _dispatched(op):
    """The function SGLang's dispatch resolves `op` (a TopK or MoE method: kernels/fused_op.py BaseFusedOp) to."""
    return getattr(op._resolve_forward_method(), "__func__", None)


def blocked(layer_id: int) -> str:
    """Why this forward's routing must go through the TopK modules ("" when it need not): SGLang binds a padded-token
    count to the forward (graph replays) or dispatches experts by EPLB placement."""
    from sglang.srt.layers.moe.topk import resolve_routing_inputs

    padded, placement = resolve_routing_inputs(layer_id=layer_id, is_draft=False)
    if padded is not None or placement is not None:
        return "a padded-token count or EPLB placement bound to the forward"
    return ""
