"""The STANDALONE draft model's forward on the CPU engine, run directly over the draft's KV pool instead of through
SGLang's model runner.

Why: the draft model is small (moe-fine's: 3 layers of width 192, 9 MB) and its forwards are short (one to a few
tokens per request), so through SGLang's runner a draft forward is almost all fixed cost: building the ForwardBatch
and the attention metadata, the layer-boundary objects around every sublayer, the logits processor. Profiled in the
engine (README, issue 15: the verify step), three draft forwards took 10-17 ms of a batch-1 K = 3 iteration on
moe-fine x48, more than a whole profiled decode of the un-inflated target (6.4-10.5 ms). Here a forward is the
model's arithmetic alone: embedding, per layer RMSNorm, the fused QKV product, NeoX rope (service/kernels/rope.py), the new K/V written to
the draft pool's slots, the CPU attention op over the pool (service/kernels/attention_fused.py, the op SGLang's CPU
backend calls), the output product, RMSNorm, the gated MLP; the final norm and the LM head over the rows asked for.

Only models whose forward it reproduces (to float rounding: the products' forms differ) are taken (`DirectDraft.of`
says why not otherwise, and the drafter then keeps SGLang's runner): a Llama-shaped dense decoder (SGLang's
LlamaForCausalLM and the classes that subclass it, e.g. Mistral) with unquantized weights, no biases, SiLU gating,
full-head NeoX rope from a plain cos/sin cache, a float32 MHA KV pool without scales, on CPU. The weights are
SGLang's own loaded tensors (no copy), and where they are all bfloat16 values (a bfloat16 checkpoint's, which
SGLang widens to float32) a bfloat16 copy of the MLP and LM head weights (`narrow`), which the stream forms of the
products read at half the bytes for forwards of up to small_gemm.MAX_ROWS rows (the LM head alone is 6.3 MB in float32
on moe-fine's draft, more than half of what a forward reads).

A forward of one token per request (a chain's drafting steps), or of a chain per request over at most MAX_ROWS
tokens (a catch-up: `chain`), runs each attention sublayer as one call of the C++ op (service/kernels/
decode_attention.py's chain_attention, the target decode op's generalisation; `attention_op`): the sublayer is a few
microseconds of arithmetic at such rows and ~45 torch ops when spelled out. A forward of moe-fine's draft after 100
tokens, one thread, weights in cache (bench/results/draft-forward-s48/one_forward.py, 2-core AMD EPYC with AVX-512):
one token 1.55 ms in torch ops and float32, 0.46 ms with the op and the bfloat16 copies, four tokens 2.04 / 0.77 ms.
An end-to-end A/B of the op for one-token forwards alone (34th session, 4 rounds of static K = 3 on x48) had read
within its 0.96-1.12 spread and the path was dropped then; the step log's draft time per step is what brought it
back (draft-forward-s48: 35-41 % less draft time per speculative step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from moe_sglang.cpu_moe import exact_bf16
from moe_sglang.direct_layers import AttentionDims, RaggedBatch, ragged_attention, rms_norm
from service.kernels import decode_attention, stream_gemm
from service.kernels.rope import neox_tables
from service.kernels.small_gemm import MAX_ROWS, GemmPlan


@dataclass(frozen=True)
class DraftLayer:
    input_norm: torch.Tensor  # [hidden]
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden]
    o: torch.Tensor  # [hidden, heads * head_dim]
    post_norm: torch.Tensor  # [hidden]
    gate_up: torch.Tensor  # [2 * intermediate, hidden]
    down: torch.Tensor  # [hidden, intermediate]
    layer_id: int  # its index in the KV pool


@dataclass(frozen=True)
class DirectDraft:
    embed: torch.Tensor  # [vocab, hidden]
    layers: tuple[DraftLayer, ...]
    norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [vocab, hidden]
    vocab: int  # the LM head's rows past it are padding
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    cos_sin_cache: torch.Tensor  # [max_positions, head_dim] cosines then sines (SGLang's RotaryEmbedding)
    kv_pool: Callable[[], object]  # the draft's KV pool now (get_key_buffer / get_value_buffer(layer_id) -> [slots,
    # kv_heads, D]), asked at every forward: SGLang may replace a runner's pool after start (post-capture resizing)
    plan: GemmPlan = field(default_factory=GemmPlan)  # each product's form per row count (default: F.linear)
    # the layers and LM head with bfloat16 MLP and LM head weights (every value exact), for forwards of at most
    # MAX_ROWS rows; None: float32 only (`narrowed`)
    narrow: tuple[tuple[DraftLayer, ...], torch.Tensor] | None = None
    attention_op: bool = False  # a chain forward's attention sublayers by the C++ op (one token per request included)

    def narrowed(self) -> DirectDraft:
        """This forward with `narrow` set where every MLP and LM head weight is a bfloat16 value and the stream
        forms can read bfloat16 (the plan tuned for them too), else itself unchanged."""
        if not stream_gemm.load():  # the stream forms are what read bfloat16 weights
            return self
        layers = []
        for layer in self.layers:
            gate_up, down = exact_bf16(layer.gate_up.detach()), exact_bf16(layer.down.detach())
            if gate_up is None or down is None:
                return self
            layers.append(replace(layer, gate_up=gate_up, down=down))
        lm_head = exact_bf16(self.lm_head.detach())
        if lm_head is None:
            return self
        narrow = [w for layer in layers for w in (layer.gate_up, layer.down)] + [lm_head]
        self.plan.tune(narrow, inputs=torch.float32)
        return replace(self, narrow=(tuple(layers), lm_head))

    @classmethod
    def of(cls, runner, ops: bool = True) -> tuple[DirectDraft | None, str]:
        """The direct forward of SGLang's draft ModelRunner, or (None, why it cannot reproduce that model); `ops`:
        with the C++ attention op for chain forwards and bfloat16-exact MLP and LM head weights where they apply
        (off: torch ops and float32 weights only, for comparisons)."""
        from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
        from sglang.srt.models.llama import LlamaForCausalLM

        model, pool = runner.model, runner.token_to_kv_pool
        if not isinstance(model, LlamaForCausalLM):
            return None, f"{type(model).__name__} is not a LlamaForCausalLM"
        if runner.device != "cpu":
            return None, f"device {runner.device}: the direct forward is the CPU engine's"
        if type(pool) is not MHATokenToKVPool or pool.store_dtype != pool.dtype or pool.page_size != 1:
            return None, f"KV pool {type(pool).__name__} ({pool.dtype} stored as {pool.store_dtype}, page size "
            f"{pool.page_size}), not a plain MHA pool of single-token pages"
        lm_head = model.lm_head.weight
        if pool.dtype != lm_head.dtype or lm_head.dtype != torch.float32:
            return None, f"weights {lm_head.dtype} / KV pool {pool.dtype}: the direct forward is float32"
        inner = model.model
        layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            rope = attn.rotary_emb
            linears = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
            if not all(isinstance(x.quant_method, UnquantizedLinearMethod) and x.bias is None for x in linears):
                return None, "quantized or biased projections"
            if type(mlp.act_fn).__name__ != "SiluAndMul":
                return None, f"activation {type(mlp.act_fn).__name__}"
            if not (rope.is_neox_style and rope.rotary_dim == rope.head_size == attn.head_dim):
                return None, "rope other than full-head NeoX"
            if hasattr(rope, "sin_cos_cache") or type(rope).__name__ != "RotaryEmbedding":
                return None, f"rope {type(rope).__name__} (scaled or precomputed variants)"
            if attn.attn.logit_cap or attn.attn.sliding_window_size not in (-1, None):
                return None, "logit soft cap or sliding window"
            if layer.input_layernorm.weight.shape != layer.post_attention_layernorm.weight.shape:
                return None, "norms of different widths"
            layers.append(
                DraftLayer(
                    input_norm=layer.input_layernorm.weight,
                    qkv=attn.qkv_proj.weight,
                    o=attn.o_proj.weight,
                    post_norm=layer.post_attention_layernorm.weight,
                    gate_up=mlp.gate_up_proj.weight,
                    down=mlp.down_proj.weight,
                    layer_id=attn.attn.layer_id,
                )
            )
        first = inner.layers[0].self_attn
        weights = [w for layer in layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [lm_head]
        direct = cls(
            embed=inner.embed_tokens.weight,
            layers=tuple(layers),
            norm=inner.norm.weight,
            lm_head=lm_head,
            vocab=model.config.vocab_size,
            heads=first.num_heads,
            kv_heads=first.num_kv_heads,
            head_dim=first.head_dim,
            eps=inner.norm.variance_epsilon,
            cos_sin_cache=first.rotary_emb.cos_sin_cache,
            kv_pool=lambda: runner.token_to_kv_pool,
            plan=GemmPlan().tune(weights),
            attention_op=ops and decode_attention.available() and first.rotary_emb.cos_sin_cache.dtype == torch.float32,
        )
        return (direct.narrowed() if ops else direct), ""

    @torch.inference_mode()
    def logits(
        self,
        tokens: torch.Tensor,  # [T] int64, the requests' tokens laid end to end
        positions: torch.Tensor,  # [T] int64
        out_cache_loc: torch.Tensor,  # [T] int64, the pool slot each token's K/V is written to
        req_to_token: torch.Tensor,  # [pool rows, max context] int32, the slots of each request's positions
        pool_rows: torch.Tensor,  # [B] the requests' rows of req_to_token
        prefix_lens: list[int],  # request b attends to its slots [0, prefix_lens[b]) and then its own tokens
        ext_lens: list[int],  # request b's tokens in `tokens`
        mask: torch.Tensor,  # [sum ext_b^2] bool: request b's [ext_b, ext_b] row-major block, token i sees token j
        logit_rows: torch.Tensor,  # [R] int64, the rows of `tokens` whose logits are returned
        chain: bool = False,  # every block of `mask` is its lower triangle (each request's tokens a chain)
        hidden: bool = False,  # also return the final hidden states at `logit_rows` (the LM head's input)
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits [R, vocab] of the draft model at `logit_rows` (with `hidden`: and its final hidden states [R, H]);
        every token's K/V is written to its slot. Labelled for SGLang's profiler as its draft model's forwards are
        (`step[DRAFT ...]`, bench.step_profile reads it)."""
        with torch.profiler.record_function(f"step[DRAFT bs={len(ext_lens)} direct]"):
            normed, lm_head = self._hidden(
                tokens, positions, out_cache_loc, req_to_token, pool_rows, prefix_lens, ext_lens, mask, logit_rows,
                chain,
            )  # fmt: skip
            logits = self.plan.mm(normed, lm_head)[:, : self.vocab]
            return (logits, normed) if hidden else logits

    def _hidden(
        self, tokens, positions, out_cache_loc, req_to_token, pool_rows, prefix_lens, ext_lens, mask, logit_rows,
        chain=False,
    ):  # fmt: skip
        """The final hidden states [R, H] at `logit_rows` (after the last norm) and the LM head weight to read."""
        layers, lm_head = self.layers, self.lm_head
        few = len(tokens) <= MAX_ROWS
        if self.narrow is not None and few:
            layers, lm_head = self.narrow
        if self.attention_op and req_to_token.dtype == torch.int32 and (max(ext_lens) == 1 or (chain and few)):
            return self._op_hidden(
                layers, lm_head, tokens, positions, out_cache_loc, req_to_token, pool_rows, prefix_lens, ext_lens,
                logit_rows,
            )  # fmt: skip
        mm = self.plan.mm
        ext = torch.as_tensor(ext_lens, dtype=torch.int64)
        rows = RaggedBatch(
            out_cache_loc, req_to_token, pool_rows, torch.as_tensor(prefix_lens, dtype=torch.int64) + ext, ext,
            torch.cumsum(ext, 0) - ext, max(ext_lens), mask,
        )  # fmt: skip
        cos, sin = neox_tables(self.cos_sin_cache, positions)
        dims = AttentionDims(self.heads, self.kv_heads, self.head_dim)
        h = self.embed[tokens]
        pool = self.kv_pool()
        for layer in layers:
            x = rms_norm(h, layer.input_norm, self.eps)
            h = h + ragged_attention(x, layer.qkv, layer.o, layer.layer_id, pool, rows, dims, cos, sin, mm)
            h = self._mlp(layer, h)
        return rms_norm(h[logit_rows], self.norm, self.eps), lm_head

    def _op_hidden(
        self, layers, lm_head, tokens, positions, out_cache_loc, req_to_token, pool_rows, prefix_lens, ext_lens,
        logit_rows,
    ):  # fmt: skip
        """_hidden where every request's tokens are a chain (one token each included): its attention sublayers by
        the C++ op (token j of a request sees its committed slots and its tokens 0..j)."""
        plan = self.plan
        prefixes = torch.as_tensor(prefix_lens, dtype=torch.int64)
        exts = torch.as_tensor(ext_lens, dtype=torch.int64)
        h = self.embed[tokens]
        pool = self.kv_pool()
        for layer in layers:
            h = decode_attention.chain_attention(
                h, layer.input_norm, self.eps, layer.qkv, layer.o, self.cos_sin_cache, positions,
                pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id), out_cache_loc,
                req_to_token, pool_rows, prefixes, exts, self.heads, self.kv_heads, self.head_dim**-0.5,
                plan.kinds(*layer.qkv.shape), plan.kinds(*layer.o.shape),
            )  # fmt: skip
            h = self._mlp(layer, h)
        return rms_norm(h[logit_rows], self.norm, self.eps), lm_head

    def _mlp(self, layer: DraftLayer, h: torch.Tensor) -> torch.Tensor:
        """h + the gated MLP sublayer's output."""
        gate, up = self.plan.mm(rms_norm(h, layer.post_norm, self.eps), layer.gate_up).chunk(2, dim=-1)
        return h + self.plan.mm(F.silu(gate) * up, layer.down)
