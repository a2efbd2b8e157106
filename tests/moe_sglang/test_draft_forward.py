"""moe_sglang/draft_forward.py (the STANDALONE draft model's forward without SGLang's runner) against transformers'
Llama on the same weights: a catch-up of two prompts together (the padded attention path), a draft tree after a
cached prefix (siblings that must not see each other), one request alone (the unpadded path), one token per request
and chains of a few (a chain's drafting step, a catch-up: the C++ attention op where it is on), GQA heads, the rows asked for only; every
token's K/V lands in its own slot of the pool; on a model whose weights are bfloat16 values, the same with its MLP and
LM head read as bfloat16 (`narrowed`)."""

import copy
import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from moe_sglang import cpu_rope
from moe_sglang.draft_forward import DirectDraft, DraftLayer
from service.kernels import stream_gemm
from service.kernels.small_gemm import MAX_ROWS
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
    chain = all(torch.equal(torch.as_tensor(p[4]), causal(len(p[2]))) for p in parts)  # the C++ op may take them
    return draft.logits(
        tokens, positions, slots, REQ_TO_TOKEN, torch.tensor([p[0] for p in parts]),
        [p[1] for p in parts], [len(p[2]) for p in parts], mask, rows, chain,
    )  # fmt: skip


def reference(hf, tokens):
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0]


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


A = [5, 17, 200, 3, 3, 41, 9, 250, 77, 12, 8, 101]
B = [60, 2, 299, 14, 14, 14, 90]


@pytest.fixture(scope="module")
def hf_bf16(hf):
    """The same model with every weight rounded to bfloat16 (kept float32, as SGLang loads a bfloat16 checkpoint)."""
    model = copy.deepcopy(hf)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return model


@pytest.mark.parametrize("attention_op", [False, True], ids=["torch-ops", "op"])
def test_direct_forward_equals_transformers_llama(hf, attention_op):
    assert not attention_op or stream_gemm.load(), stream_gemm.error()
    draft = dataclasses.replace(direct_of(hf), attention_op=attention_op)  # one-token forwards by the C++ op or not
    assert draft.narrowed().narrow is None, "float32 weights that are not bfloat16 values stay float32"
    check_forwards(draft, hf)


@pytest.mark.parametrize("attention_op", [False, True], ids=["torch-ops", "op"])
def test_bf16_exact_weights_are_read_narrow(hf_bf16, attention_op):
    assert stream_gemm.load(), stream_gemm.error()
    draft = dataclasses.replace(direct_of(hf_bf16), attention_op=attention_op).narrowed()
    layers, lm_head = draft.narrow
    assert lm_head.dtype == torch.bfloat16 and all(
        x.gate_up.dtype == x.down.dtype == torch.bfloat16 and x.qkv.dtype == torch.float32 for x in layers
    )
    assert torch.equal(lm_head.float(), hf_bf16.lm_head.weight), "the narrow copy holds the same values"
    read = []  # (rows, weight dtype) of every product
    planned = draft.plan.mm
    draft.plan.mm = lambda x, w: read.append((x.shape[0], w.dtype)) or planned(x, w)
    check_forwards(draft, hf_bf16)
    assert {d for m, d in read if m > MAX_ROWS} == {torch.float32}, "forwards of more rows read the float32 weights"
    assert torch.bfloat16 in {d for m, d in read if m <= MAX_ROWS}, "forwards of few rows read the bfloat16 copies"


def check_forwards(draft, hf):
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

    # one token each (a chain's drafting step: the decode attention op where it is on)
    u, v = 49, 50
    nb = len(B) + 3
    got = forward(draft, [(0, n + 1, [u], [n + 1], causal(1)), (1, nb, [v], [nb], causal(1))])
    torch.testing.assert_close(got[0], reference(hf, A + [x, u])[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], reference(hf, B + [z, w, w, v])[-1], atol=1e-4, rtol=1e-4)


def greedy(hf, tokens, n):
    out = []
    for _ in range(n):
        out.append(int(reference(hf, tokens + out)[-1].argmax()))
    return out


@pytest.mark.parametrize("attention_op", [False, True], ids=["torch-ops", "op"])
def test_chain_drafts_are_the_draft_models_greedy_continuation(hf, attention_op):
    """DraftModelDrafter over the direct forward, chains (topk = 1) of two requests to different depths: the catch-up
    of each prompt, then one token per request and depth, each after the nodes above it in the draft cache (a read of
    a slot no forward wrote is NaN, and would change the drafts)."""
    from moe_sglang.draft_model import DraftModelDrafter

    draft = dataclasses.replace(direct_of(hf), attention_op=attention_op)
    drafter = DraftModelDrafter(worker=None, topk=1, max_depth=4, stride=5, direct=draft)
    prompts = [A, B]
    batch = SimpleNamespace(
        reqs=[SimpleNamespace(rid=f"r{i}", origin_input_ids=p, output_ids=[]) for i, p in enumerate(prompts)],
        seq_lens_cpu=torch.tensor([len(p) - 1 for p in prompts]),  # committed: the root (last token) is not
        seq_lens=torch.tensor([len(p) - 1 for p in prompts]),
        req_pool_indices=torch.tensor([0, 1]),
        req_to_token_pool=SimpleNamespace(req_to_token=REQ_TO_TOKEN),
        device="cpu",
    )
    drafter.reset(["r0", "r1"])
    rows = []  # each forward's tokens per request
    drafter.direct = SimpleNamespace(logits=lambda *a, **kw: rows.append(list(a[6])) or draft.logits(*a, **kw))
    _, drafting, forwards = drafter.draft(batch, [4, 2])
    assert forwards == 4
    assert rows == [[len(A), len(B)], [1, 1], [1], [1]], "a chain's later forwards run its newest node alone"
    for r, depth in zip(drafting, (4, 2), strict=True):
        chain = [n.token for n in r.tree.nodes[1:]]
        assert chain == greedy(hf, prompts[r.row], depth), f"request {r.row}"


def batch_of(prompts, outputs, committed):
    """A speculative batch of two requests (slots: REQ_TO_TOKEN), `committed` tokens of each in the KV caches."""
    return SimpleNamespace(
        reqs=[
            SimpleNamespace(rid=f"r{i}", origin_input_ids=p, output_ids=o)
            for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
        ],
        seq_lens_cpu=torch.tensor(committed),
        seq_lens=torch.tensor(committed),
        req_pool_indices=torch.tensor([0, 1]),
        req_to_token_pool=SimpleNamespace(req_to_token=REQ_TO_TOKEN),
        device="cpu",
    )


@pytest.mark.parametrize("attention_op", [False, True], ids=["torch-ops", "op"])
def test_judgements_beside_the_target_and_prompts_caught_up_at_prefill_judge_as_at_once(hf, attention_op):
    """moe_sglang/draft_thread.py: a judgement whose draft forward runs on the draft thread gives the outcomes, draft
    cache and `seen` of one run at once, bit for bit; prompts caught up beside their prefill (prefill_later) leave a
    judgement only the emitted tokens to run, with the same outcomes and the same draft K/V (to rounding: other row
    counts per forward); on the scheduler's own thread, and for a request that may not draft, it stays lazy."""
    from moe_sglang.draft_judge import judge, judge_later
    from moe_sglang.draft_model import DraftModelDrafter
    from moe_sglang.draft_thread import AT_ONCE, Beside

    assert not attention_op or stream_gemm.load(), stream_gemm.error()
    prompts = [A, B]
    outputs = [greedy(hf, A, 5) + [7, 250], [1, 2, 3, 4, 5]]  # the draft's own tokens (hits), then misses
    decode = batch_of(prompts, outputs, [len(p) + len(o) - 1 for p, o in zip(prompts, outputs, strict=True)])
    prefill = batch_of(prompts, [[], []], [len(p) for p in prompts])

    def drafter():
        draft = dataclasses.replace(direct_of(hf), attention_op=attention_op)  # a NaN pool of its own
        made = DraftModelDrafter(worker=None, topk=1, max_depth=3, stride=4, direct=draft)
        made.reset(["r0", "r1"])
        return made, draft.kv_pool()

    at_once, pool = drafter()
    shadow, ran = judge(at_once, decode, [0, 1])
    assert ran == sum(decode.seq_lens.tolist()) and [o.request_id for o in shadow[:1]] == ["r0"]
    assert shadow[0].accepted == 3 and sum(o.accepted for o in shadow) < sum(o.k for o in shadow), shadow
    beside = Beside(threaded=True)
    later, later_pool = drafter()
    assert judge_later(later, decode, [0, 1], beside)() == (shadow, ran)
    caught, caught_pool = drafter()
    assert caught.prefill_later(prefill, AT_ONCE)() == 0 and caught.seen == {"r0": 0, "r1": 0}
    assert caught.prefill_later(prefill, beside)() == len(A) + len(B)
    assert caught.seen == {"r0": len(A), "r1": len(B)}
    assert judge(caught, decode, [0, 1]) == (shadow, ran - len(A) - len(B))
    assert later.seen == caught.seen == at_once.seen
    one, _ = drafter()  # a request that may not draft (its hints cap K at 0) is not caught up
    assert one.prefill_later(prefill, beside, [False, True])() == len(B) and one.seen == {"r0": 0, "r1": len(B)}
    for layer in range(len(pool.keys)):
        assert torch.equal(later_pool.keys[layer].nan_to_num(7.0), pool.keys[layer].nan_to_num(7.0))
        assert torch.allclose(caught_pool.keys[layer], pool.keys[layer], atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("root_hit", [True, False], ids=["root-matched", "root-missed"])
def test_a_judgement_given_the_steps_tokens_judges_each_root_too(hf, root_hit):
    """draft_judge.py, judging the root: the judging forward predicts after each request's root too; the join given
    `now` (the token the step emitted after each batch row's root) judges that prediction with the others, exactly
    as a replay of the draft's greedy predictions at every judged position reads (without `now`, as `judge`)."""
    from moe_sglang.draft_judge import judge_later, replayed
    from moe_sglang.draft_model import DraftModelDrafter
    from moe_sglang.draft_thread import Beside

    prompts = [A, B]
    outputs = [greedy(hf, A, 5) + [7, 250], [1, 2, 3, 4, 5]]
    decode = batch_of(prompts, outputs, [len(p) + len(o) - 1 for p, o in zip(prompts, outputs, strict=True)])
    made = DraftModelDrafter(worker=None, topk=1, max_depth=3, stride=4, direct=direct_of(hf))
    made.reset(["r0", "r1"])
    own = [greedy(hf, p + o, 1)[0] for p, o in zip(prompts, outputs, strict=True)]  # the draft's token after the root
    now = own if root_hit else [(t + 1) % 300 for t in own]
    shadow, ran = judge_later(made, decode, [0, 1], Beside(threaded=True))(now)
    expected = []
    for rid, p, o, t in zip(("r0", "r1"), prompts, outputs, now, strict=True):
        context = p + o
        hits = [greedy(hf, context[: len(p) + s + 1], 1)[0] == nxt for s, nxt in enumerate([*o[1:], t])]
        assert hits[-1] == root_hit
        expected += [(rid, k, a) for k, a in replayed(hits, 3)]
    assert [(o.request_id, o.k, o.accepted) for o in shadow] == expected
    assert ran == sum(decode.seq_lens.tolist()) and made.seen == {"r0": len(A) + 7, "r1": len(B) + 5}


def test_chains_stop_at_the_first_draft_near_its_runner_up(hf):
    """A chain with a stop ratio ends at its first draft whose probability is below ratio x the runner-up's: the
    drafts above it are kept (and are the draft model's greedy chain), no forward runs past it, and the draft cache
    is valid up to them; a request without a stop drafts to its budget in the same step."""
    from moe_sglang.draft_model import DraftModelDrafter

    def margins(tokens, n):
        out, gaps = [], []
        for _ in range(n):
            top = torch.log_softmax(reference(hf, tokens + out)[-1], -1).topk(2)
            gaps.append(float(top.values[0] - top.values[1]))
            out.append(int(top.indices[0]))
        return gaps

    # a request whose chain first falls below a threshold past its first draft (a deeper stop than the first)
    cases = [
        (g[d], d, i) for i, p in enumerate((A, B)) for g in [margins(p, 4)] for d in range(1, 4) if g[d] < min(g[:d])
    ]
    assert cases, "no chain of the fixture's model narrows past its first draft"
    gap, stop_at, row = cases[0]
    ratio = math.exp(gap + 1e-4)
    prompts = [A, B] if row == 0 else [B, A]
    batch = batch_of(prompts, [[], []], [len(p) - 1 for p in prompts])
    drafter = DraftModelDrafter(worker=None, topk=1, max_depth=4, stride=5, direct=direct_of(hf))
    drafter.reset(["r0", "r1"])
    trees, drafting, forwards = drafter.draft(batch, [4, 2], [ratio, 0.0])
    assert list(trees.drafts) == [stop_at, 2]
    assert drafting[0].kept == stop_at and drafting[0].depth_cap == stop_at + 1 and drafting[1].kept is None
    assert forwards == max(stop_at + 1, 2)
    assert [n.token for n in drafting[0].tree.nodes[1 : stop_at + 1]] == greedy(hf, prompts[0], stop_at)
    drafter.accepted(batch, drafting, [stop_at, 0])
    assert drafter.seen == {"r0": len(prompts[0]) + stop_at, "r1": len(prompts[1])}

    again = DraftModelDrafter(worker=None, topk=1, max_depth=4, stride=5, direct=direct_of(hf))
    again.reset(["r0", "r1"])
    same, _, _ = again.draft(batch, [4, 2], [1.0, 1.0])  # a ratio of 1 stops nothing
    assert list(same.drafts) == [4, 2]
