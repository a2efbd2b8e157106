"""moe_sglang/draft_forward.py (the STANDALONE draft model's forward without SGLang's runner) against transformers'
Llama on the same weights: a catch-up of two prompts together (the padded attention path), a draft tree after a
cached prefix (siblings that must not see each other), one request alone (the unpadded path), GQA heads, the rows
asked for only; every token's K/V lands in its own slot of the pool."""

import pytest
import torch

from moe_sglang import cpu_rope
from moe_sglang.draft_forward import DirectDraft, DraftLayer
from tests.moe_sglang.direct_fixtures import fused_qkv, nan_pool, spread_weights, two_request_slots

HEADS, KV_HEADS, HEAD_DIM, SLOTS, CONTEXT = 4, 2, 16, 128, 64


@pytest.fixture(scope="module")
def hf():
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=HEADS * HEAD_DIM,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=CONTEXT,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return spread_weights(transformers.LlamaForCausalLM(config))


def direct_of(hf) -> DirectDraft:
    """The direct forward on the transformers model's weights (SGLang's fused layout: qkv and gate_up stacked)."""
    layers = tuple(
        DraftLayer(
            input_norm=layer.input_layernorm.weight,
            qkv=fused_qkv(layer.self_attn),
            o=layer.self_attn.o_proj.weight,
            post_norm=layer.post_attention_layernorm.weight,
            gate_up=torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
            down=layer.mlp.down_proj.weight,
            layer_id=i,
        )
        for i, layer in enumerate(hf.model.layers)
    )
    pool = nan_pool(len(layers), SLOTS, KV_HEADS, HEAD_DIM)
    rope = cpu_rope.sglang_rope(HEAD_DIM, HEAD_DIM, CONTEXT, hf.config.rope_parameters["rope_theta"])
    return DirectDraft(
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
        kv_pool=lambda: pool,
    )


REQ_TO_TOKEN = two_request_slots(CONTEXT)


def forward(draft, parts, rows=None):
    """parts: (request, prefix, tokens, positions, [ext, ext] visibility); the logits of `rows` (default all)."""
    tokens = torch.tensor([t for p in parts for t in p[2]])
    positions = torch.tensor([q for p in parts for q in p[3]])
    slots = torch.cat([REQ_TO_TOKEN[p[0], p[1] : p[1] + len(p[2])] for p in parts]).long()
    mask = torch.cat([torch.as_tensor(p[4]).reshape(-1) for p in parts])
    rows = torch.arange(len(tokens)) if rows is None else torch.tensor(rows)
    return draft.logits(
        tokens, positions, slots, REQ_TO_TOKEN, torch.tensor([p[0] for p in parts]),
        [p[1] for p in parts], [len(p[2]) for p in parts], mask, rows,
    )  # fmt: skip


def reference(hf, tokens):
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0]


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


A = [5, 17, 200, 3, 3, 41, 9, 250, 77, 12, 8, 101]
B = [60, 2, 299, 14, 14, 14, 90]


def test_direct_forward_equals_transformers_llama(hf):
    draft = direct_of(hf)
    # catch-up of both prompts in one forward (padded: two requests, <= 16 tokens each)
    got = forward(draft, [(0, 0, A, range(len(A)), causal(len(A))), (1, 0, B, range(len(B)), causal(len(B)))])
    torch.testing.assert_close(got[: len(A)], reference(hf, A), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[len(A) :], reference(hf, B), atol=1e-4, rtol=1e-4)
    assert not draft.kv_pool().keys[0][REQ_TO_TOKEN[0, : len(A)].long()].isnan().any(), "the prompt's K/V were written"

    # A: a tree after its cached prompt (x, then siblings y1 and y2 at the same position); B: one token
    x, y1, y2, z = 44, 45, 46, 47
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    n = len(A)
    got = forward(draft, [(0, n, [x, y1, y2], [n, n + 1, n + 1], tree), (1, len(B), [z], [len(B)], causal(1))])
    torch.testing.assert_close(got[0], reference(hf, A + [x])[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], reference(hf, A + [x, y1])[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[2], reference(hf, A + [x, y2])[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[3], reference(hf, B + [z])[-1], atol=1e-4, rtol=1e-4)

    # B alone (unpadded), reading z's K/V from its slot; only the rows asked for come back
    w = 48
    got = forward(draft, [(1, len(B) + 1, [w, w], [len(B) + 1, len(B) + 2], causal(2))], rows=[1])
    assert got.shape == (1, hf.config.vocab_size)
    torch.testing.assert_close(got[0], reference(hf, B + [z, w, w])[-1], atol=1e-4, rtol=1e-4)
