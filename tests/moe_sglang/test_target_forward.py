"""moe_sglang/target_forward.py (the target model's decode forward without SGLang's model stack) against transformers'
Mixtral on the same weights: two requests of different lengths decoded token by token, together (the padded
attention path) and one alone (the unpadded path), GQA heads; every token's K/V lands in its own slot of the pool,
and the routing and experts are the layer's own callables (in the engine: SGLang's TopK and FusedMoE modules)."""

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from moe_sglang import cpu_rope
from moe_sglang.target_forward import DirectTarget, TargetLayer
from service.kernels import decode_attention, stream_gemm
from service.kernels.moe_ref import moe_forward, route_topk
from service.kernels.small_gemm import MAX_ROWS
from tests.moe_sglang.direct_fixtures import fused_qkv, nan_pool, spread_weights, two_request_slots

HEADS, KV_HEADS, HEAD_DIM, EXPERTS, TOP_K, SLOTS, CONTEXT = 4, 2, 16, 8, 2, 128, 64


@pytest.fixture(scope="module")
def hf():
    import transformers

    config = transformers.MixtralConfig(
        vocab_size=300,
        hidden_size=HEADS * HEAD_DIM,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        max_position_embeddings=CONTEXT,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return spread_weights(transformers.MixtralForCausalLM(config))


class Routing:
    """The layer's routing as the engine's TopK module returns it: (weights, ids, router logits); counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x, router_logits):
        self.calls += 1
        ids, weights = route_topk(router_logits, TOP_K)
        return weights, ids, router_logits


def direct_of(hf) -> DirectTarget:
    """The direct forward on the transformers model's weights (SGLang's fused qkv; w13 = gate then up)."""
    routing = Routing()

    def experts_of(layer):
        w13, w2 = layer.mlp.experts.gate_up_proj, layer.mlp.experts.down_proj
        return lambda x, out: moe_forward(x, w13, w2, out[1], out[0])

    layers = tuple(
        TargetLayer(
            input_norm=layer.input_layernorm.weight,
            qkv=fused_qkv(layer.self_attn),
            o=layer.self_attn.o_proj.weight,
            post_norm=layer.post_attention_layernorm.weight,
            router=layer.mlp.gate.weight,
            topk=routing,
            experts=experts_of(layer),
            layer_id=i,
        )
        for i, layer in enumerate(hf.model.layers)
    )
    rope = cpu_rope.sglang_rope(HEAD_DIM, HEAD_DIM, CONTEXT, hf.config.rope_parameters["rope_theta"])
    return DirectTarget(
        embed=hf.model.embed_tokens.weight,
        layers=layers,
        norm=hf.model.norm.weight,
        lm_head=hf.lm_head.weight,
        vocab=hf.config.vocab_size,
        heads=HEADS,
        kv_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        eps=hf.config.rms_norm_eps,
        cos_sin_cache=rope.cos_sin_cache,
    )


REQ_TO_TOKEN = two_request_slots(CONTEXT)


def reference(hf, tokens):
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0]


A = [5, 17, 200, 3, 3, 41, 9, 250, 77, 12, 8, 101]
B = [60, 2, 299, 14, 14, 14, 90]


@pytest.mark.parametrize(
    "kinds",
    [None, lambda weight: [], lambda weight: [stream_gemm.KINDS.index("sequential")] * 2],
    ids=["torch-ops", "op-linear", "op-stream"],
)
def test_decode_equals_transformers_mixtral(hf, kinds):
    assert kinds is None or stream_gemm.load(), stream_gemm.error()
    direct = dataclasses.replace(direct_of(hf), kinds=kinds)  # the decode attention as torch ops / the C++ op
    pool = nan_pool(len(direct.layers), SLOTS, KV_HEADS, HEAD_DIM)
    got = {0: [], 1: []}
    # A's first tokens alone (one request: unpadded), then A and B together (padded to the longer), B's row 1
    for step in range(len(A)):
        rows = [0] if step < len(A) - len(B) else [0, 1]
        positions = [step if r == 0 else step - (len(A) - len(B)) for r in rows]
        tokens = [A[step] if r == 0 else B[p] for r, p in zip(rows, positions, strict=True)]
        logits = direct.decode(
            torch.tensor(tokens),
            torch.tensor(positions),
            torch.stack([REQ_TO_TOKEN[r, p] for r, p in zip(rows, positions, strict=True)]).long(),
            pool,
            REQ_TO_TOKEN,
            torch.tensor(rows),
            torch.tensor([p + 1 for p in positions]),
        )
        assert logits.shape == (len(rows), hf.config.vocab_size)
        for r, row in zip(rows, logits, strict=True):
            got[r].append(row)
    torch.testing.assert_close(torch.stack(got[0]), reference(hf, A), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.stack(got[1]), reference(hf, B), atol=1e-4, rtol=1e-4)
    for layer in range(len(direct.layers)):  # every token's K/V written to its own slot, no other
        written = ~pool.keys[layer].isnan().any(dim=(1, 2))
        expected = torch.zeros(SLOTS, dtype=torch.bool)
        expected[REQ_TO_TOKEN[0, : len(A)].long()] = True
        expected[REQ_TO_TOKEN[1, : len(B)].long()] = True
        assert torch.equal(written, expected)
    assert direct.layers[0].topk.calls == len(A) * len(direct.layers), "routing: the layer's own, once per layer"


def test_a_bfloat16_valued_lm_head_is_read_narrow_by_forwards_of_few_rows(hf):
    assert stream_gemm.load(), stream_gemm.error()
    assert direct_of(hf).narrowed().lm_head_bf16 is None, "an LM head that is not bfloat16 values stays float32"
    bf16_hf = copy.deepcopy(hf)
    with torch.no_grad():
        bf16_hf.lm_head.weight.copy_(hf.lm_head.weight.to(torch.bfloat16).float())
    direct = direct_of(bf16_hf).narrowed()
    weight, planned = direct.lm_head_bf16
    assert weight.dtype == torch.bfloat16 and torch.equal(weight.float(), bf16_hf.lm_head.weight)
    read = []  # (weight dtype, rows) of every LM head product
    direct = dataclasses.replace(
        direct,
        mm=lambda x, w: read.append((w.dtype, x.shape[0])) or F.linear(x, w),
        lm_head_bf16=(weight, lambda x, w: read.append((w.dtype, x.shape[0])) or planned(x, w)),
    )
    h = torch.randn(MAX_ROWS + 1, hf.config.hidden_size, generator=torch.Generator().manual_seed(1))
    full, few = direct._lm_head(h), direct._lm_head(h[:3])
    assert read == [(torch.float32, MAX_ROWS + 1), (torch.bfloat16, 3)]
    assert few.shape == (3, hf.config.vocab_size)
    torch.testing.assert_close(few, full[:3], atol=1e-5, rtol=1e-5)  # the same function to float rounding


def verify(direct, pool, parts):
    """parts: (request, prefix, tokens, positions, [ext, ext] visibility or None for a chain); logits of every row."""
    tokens = torch.tensor([t for p in parts for t in p[2]])
    ext = torch.tensor([len(p[2]) for p in parts])
    masks = [p[4] for p in parts]
    mask = None if all(m is None for m in masks) else torch.cat([torch.as_tensor(m).reshape(-1) for m in masks])
    return direct.verify(
        tokens,
        torch.tensor([q for p in parts for q in p[3]]),
        torch.cat([REQ_TO_TOKEN[p[0], p[1] : p[1] + len(p[2])] for p in parts]).long(),
        pool,
        REQ_TO_TOKEN,
        torch.tensor([p[0] for p in parts]),
        torch.tensor([p[1] for p in parts]),
        ext,
        torch.cumsum(ext, 0) - ext,
        mask,
    )


@pytest.mark.parametrize(
    "kinds",
    [None, lambda weight: [], lambda weight: [stream_gemm.KINDS.index("sequential")] * 2],
    ids=["torch-ops", "op-linear", "op-stream"],
)
def test_verify_equals_transformers_mixtral(hf, kinds, monkeypatch):
    """A ragged verify after cached prompts: A verifies a tree (a root, then two siblings that must not see each
    other), B a 1-token root alone in the same forward; then B alone verifies a chain (causal, no mask), then both
    chains together. With `kinds` the chains' attention sublayers are the C++ op's (chain_attention), the tree's
    the torch ops'."""
    assert kinds is None or stream_gemm.load(), stream_gemm.error()
    direct = dataclasses.replace(direct_of(hf), kinds=kinds)
    chains = []
    real = decode_attention.chain_attention
    monkeypatch.setattr(decode_attention, "chain_attention", lambda *a: chains.append(len(a[0])) or real(*a))
    pool = nan_pool(len(direct.layers), SLOTS, KV_HEADS, HEAD_DIM)
    for row, prompt in ((0, A), (1, B)):  # the prompts' K/V, as the engine's prefill leaves them
        n = len(prompt)
        verify(direct, pool, [(row, 0, prompt, range(n), torch.ones(n, n, dtype=torch.bool).tril())])
    x, y1, y2, z = 44, 45, 46, 47
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    n, m = len(A), len(B)
    got = verify(direct, pool, [(0, n, [x, y1, y2], [n, n + 1, n + 1], tree), (1, m, [z], [m], torch.ones(1, 1))])
    torch.testing.assert_close(got[0], reference(hf, A + [x])[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], reference(hf, A + [x, y1])[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[2], reference(hf, A + [x, y2])[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[3], reference(hf, B + [z])[-1], atol=1e-4, rtol=1e-4)
    got = verify(direct, pool, [(1, m + 1, [x, y1], [m + 1, m + 2], None)])
    torch.testing.assert_close(got, reference(hf, B + [z, x, y1])[-2:], atol=1e-4, rtol=1e-4)
    u, w, v = 48, 49, 50
    got = verify(direct, pool, [(0, n + 1, [u, w], [n + 1, n + 2], None), (1, m + 3, [v], [m + 3], None)])
    torch.testing.assert_close(got[:2], reference(hf, A + [x, u, w])[-2:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[2], reference(hf, B + [z, x, y1, v])[-1], atol=1e-4, rtol=1e-4)
    # the op took every forward of chains, once per layer: the prompts (causal masks given: 12 rows, then 7) and the
    # two verifies without a mask (2 rows, then 3); the forward with a branching tree kept torch's ops
    layers = len(direct.layers)
    assert chains == ([] if kinds is None else [len(A)] * layers + [len(B)] * layers + [2] * layers + [3] * layers)
