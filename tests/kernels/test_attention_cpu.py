"""Extend and decode attention vs a naive per-request, per-head, per-query softmax(QK^T)V over the paged pool."""

import random

import pytest
import torch

from service.kernels.attention_cpu import (
    decode_attention_cpu,
    decode_attention_loop,
    extend_attention_cpu,
    extend_attention_loop,
)
from service.kernels.attention_fused import decode_attention_fused, extend_attention_fused
from tests.kernels._attention_reference import naive_attention
from tests.kernels._trees import ancestors_with_self, random_parents

D, DV, POOL, CONTEXT = 8, 8, 96, 24


def _pool(g: torch.Generator, kv_heads: int, dtype: torch.dtype):
    k_buffer = torch.randn(POOL, kv_heads, D, generator=g).to(dtype)
    v_buffer = torch.randn(POOL, kv_heads, DV, generator=g).to(dtype)
    return k_buffer, v_buffer


# (seed, bs, heads, kv_heads, dtype, logit_cap, window, with_sinks, tree, pass_new_kv, causal)
EXTEND_CASES = [
    (0, 1, 2, 2, torch.float32, 0.0, 0, False, False, True, True),
    (1, 3, 4, 2, torch.float32, 0.0, 0, False, False, True, True),
    (2, 2, 6, 1, torch.float32, 4.0, 0, False, False, False, True),
    (3, 3, 4, 4, torch.float32, 0.0, 4, False, False, True, True),
    (4, 2, 4, 2, torch.float32, 0.0, 0, True, False, True, True),
    (5, 3, 4, 2, torch.float32, 0.0, 0, False, True, True, True),  # speculative verify with a tree
    (6, 2, 4, 1, torch.float32, 3.0, 0, True, True, False, True),
    (7, 2, 4, 2, torch.float32, 0.0, 0, False, False, True, False),  # bidirectional
    (8, 3, 4, 2, torch.bfloat16, 0.0, 0, False, True, True, True),
]


@pytest.mark.parametrize(
    "extend_op", [extend_attention_fused, extend_attention_cpu, extend_attention_loop], ids=["fused", "batched", "loop"]
)
@pytest.mark.parametrize(
    ("seed", "bs", "heads", "kv_heads", "dtype", "logit_cap", "window", "with_sinks", "tree", "pass_new_kv", "causal"),
    EXTEND_CASES,
)
def test_extend_attention_matches_naive(
    seed, bs, heads, kv_heads, dtype, logit_cap, window, with_sinks, tree, pass_new_kv, causal, extend_op
):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    k_buffer, v_buffer = _pool(g, kv_heads, dtype)
    draft = rng.randrange(2, 7)
    # odd seeds verify ragged trees (each request its own draft length, RaggedVerifyLayout), even ones uniform trees
    ext_lens = [(rng.randrange(2, 7) if seed % 2 else draft) if tree else rng.randrange(1, 9) for _ in range(bs)]
    seq_lens = [e + rng.randrange(0, 12) for e in ext_lens]
    slots = torch.randperm(POOL, generator=g)[: bs * CONTEXT].view(bs, CONTEXT).to(torch.int32)
    req_to_token = torch.zeros(bs + 2, CONTEXT, dtype=torch.int32)
    pools = rng.sample(range(bs + 2), bs)
    req_to_token[pools] = slots
    total = sum(ext_lens)
    starts = [sum(ext_lens[:b]) for b in range(bs)]
    q = torch.randn(total, heads, D, generator=g).to(dtype)
    k_new = torch.randn(total, kv_heads, D, generator=g).to(dtype)
    v_new = torch.randn(total, kv_heads, DV, generator=g).to(dtype)
    for b in range(bs):  # SGLang stores the new K/V in the pool before calling the op
        prefix = seq_lens[b] - ext_lens[b]
        for i in range(ext_lens[b]):
            slot = int(req_to_token[pools[b], prefix + i])
            k_buffer[slot], v_buffer[slot] = k_new[starts[b] + i], v_new[starts[b] + i]
    trees = [random_parents(rng, ext_lens[b]) for b in range(bs)] if tree else None
    tree_mask = (
        torch.tensor([j in ancestors_with_self(p, i) for p in trees for i in range(len(p)) for j in range(len(p))])
        if tree
        else None
    )
    sinks = torch.randn(heads, generator=g) if with_sinks else None
    out = torch.full((total, heads, DV), float("nan"), dtype=dtype)
    extend_op(
        q, k_new if pass_new_kv else None, v_new if pass_new_kv else None, out, k_buffer, v_buffer, 1.0, 1.0,
        req_to_token, torch.tensor(pools), torch.tensor(seq_lens), torch.tensor(ext_lens, dtype=torch.int32),
        torch.tensor(starts, dtype=torch.int32), max(ext_lens), 0.3, logit_cap, False, window, None, sinks,
        tree_mask, causal,
    )  # fmt: skip
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    for b in range(bs):
        prefix = seq_lens[b] - ext_lens[b]
        row = req_to_token[pools[b]]
        keys = [k_buffer[int(row[j])] for j in range(seq_lens[b])]
        values = [v_buffer[int(row[j])] for j in range(seq_lens[b])]
        for i in range(ext_lens[b]):
            t = prefix + i
            visible = []
            for j in range(seq_lens[b]):
                if j < prefix:
                    seen = True
                elif tree:
                    seen = (j - prefix) in ancestors_with_self(trees[b], i)
                else:
                    seen = j <= t or not causal
                visible.append(seen and (window <= 0 or abs(t - j) < window))
            expected = naive_attention(q[starts[b] + i], keys, values, visible, 0.3, logit_cap, sinks)
            assert torch.allclose(out[starts[b] + i].double(), expected, atol=tol, rtol=tol), (b, i)


def test_tree_mask_of_wrong_size_is_rejected():
    q = torch.zeros(4, 2, D)
    with pytest.raises(ValueError, match="tree_mask"):
        extend_attention_cpu(
            q, q, q, q.clone(), torch.zeros(8, 2, D), torch.zeros(8, 2, D), 1.0, 1.0,
            torch.arange(8, dtype=torch.int32).view(1, 8), torch.tensor([0]), torch.tensor([4]),
            torch.tensor([4]), torch.tensor([0]), 4, 1.0, 0.0, False, 0, None, None,
            torch.ones(9, dtype=torch.bool), True,
        )  # fmt: skip


# (seed, bs, heads, kv_heads, dtype, logit_cap, window, with_sinks, write_new)
DECODE_CASES = [
    (0, 1, 2, 2, torch.float32, 0.0, 0, False, True),
    (1, 4, 4, 2, torch.float32, 0.0, 0, False, True),
    (2, 3, 6, 1, torch.float32, 5.0, 0, True, True),
    (3, 3, 4, 4, torch.float32, 0.0, 3, False, False),
    (4, 4, 4, 2, torch.bfloat16, 0.0, 0, False, True),
    (5, 1, 4, 2, torch.float32, 0.0, 3, False, True),  # one request in a window: the fused op's unpadded path
]


@pytest.mark.parametrize(
    "decode_op", [decode_attention_fused, decode_attention_cpu, decode_attention_loop], ids=["fused", "batched", "loop"]
)
@pytest.mark.parametrize(
    ("seed", "bs", "heads", "kv_heads", "dtype", "logit_cap", "window", "with_sinks", "write_new"), DECODE_CASES
)
def test_decode_attention_writes_kv_and_matches_naive(
    seed, bs, heads, kv_heads, dtype, logit_cap, window, with_sinks, write_new, decode_op
):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    k_buffer, v_buffer = _pool(g, kv_heads, dtype)
    seq_lens = [rng.randrange(1, CONTEXT) for _ in range(bs)]
    req_to_token = torch.randperm(POOL, generator=g)[: bs * CONTEXT].view(bs, CONTEXT).to(torch.int32)
    pools = list(range(bs))
    rng.shuffle(pools)
    loc = torch.tensor([int(req_to_token[pools[b], seq_lens[b] - 1]) for b in range(bs)])
    query = torch.randn(bs, heads, D, generator=g).to(dtype)
    key = torch.randn(bs, kv_heads, D, generator=g).to(dtype)
    value = torch.randn(bs, kv_heads, DV, generator=g).to(dtype)
    sinks = torch.randn(heads, generator=g) if with_sinks else None
    expected_k, expected_v = k_buffer.clone(), v_buffer.clone()
    if write_new:
        expected_k[loc], expected_v[loc] = key, value
    out = torch.full((bs, heads, DV), float("nan"), dtype=dtype)
    attn_logits = torch.zeros(bs, heads, 8, DV + 1)
    decode_op(
        query, k_buffer, v_buffer, 1.0, 1.0, out, key if write_new else None, value if write_new else None, loc,
        attn_logits, req_to_token, torch.tensor(pools), torch.tensor(seq_lens), 0.25, logit_cap, False, window, None,
        sinks,
    )  # fmt: skip
    assert torch.equal(k_buffer, expected_k) and torch.equal(v_buffer, expected_v)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    for b in range(bs):
        row = req_to_token[pools[b]]
        n = seq_lens[b]
        keys = [expected_k[int(row[j])] for j in range(n)]
        values = [expected_v[int(row[j])] for j in range(n)]
        visible = [window <= 0 or (n - 1 - j) < window for j in range(n)]
        expected = naive_attention(query[b], keys, values, visible, 0.25, logit_cap, sinks)
        assert torch.allclose(out[b].double(), expected, atol=tol, rtol=tol), b


def test_long_prefill_is_blocked_without_changing_the_result(monkeypatch):
    """Query blocking (the memory bound for long prompts) gives the same output as one block."""
    import service.kernels.attention_cpu as attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(37, 4, D, generator=g),
        torch.randn(50, 2, D, generator=g),
        torch.randn(50, 2, DV, generator=g),
    )
    visible = torch.rand(37, 50, generator=g) < 0.7
    whole = attention.attend(q, k, v, visible, 0.5, 0.0, None)
    monkeypatch.setattr(attention, "_SCORE_BUDGET", 4 * 50 * 5)  # 5 query rows per block
    assert torch.allclose(attention.attend(q, k, v, visible, 0.5, 0.0, None), whole, atol=1e-6)


def test_batched_ops_fall_back_to_the_loop_beyond_the_score_budget(monkeypatch):
    """A batch whose padded scores exceed the budget runs request by request, with the same result."""
    import service.kernels.attention_cpu as attention

    g = torch.Generator().manual_seed(3)
    k_buffer, v_buffer = _pool(g, 2, torch.float32)
    req_to_token = torch.randperm(POOL, generator=g)[: 2 * CONTEXT].view(2, CONTEXT).to(torch.int32)
    q = torch.randn(9, 4, D, generator=g)
    args = (torch.tensor([0, 1]), torch.tensor([10, 12]), torch.tensor([4, 5]), torch.tensor([0, 4]))
    outs = []
    for budget in (attention._SCORE_BUDGET, 8):
        monkeypatch.setattr(attention, "_SCORE_BUDGET", budget)
        out = torch.zeros(9, 4, DV)
        calls = []
        monkeypatch.setattr(attention, "extend_attention_loop", _counting(calls, attention.extend_attention_loop))
        extend_attention_cpu(
            q, None, None, out, k_buffer, v_buffer, 1.0, 1.0, req_to_token, *args, 5, 0.3, 0.0, False, 0, None,
            None, None, True,
        )  # fmt: skip
        outs.append((out, len(calls)))
    (batched, loop_calls_wide), (looped, loop_calls_tight) = outs
    assert loop_calls_wide == 0 and loop_calls_tight == 1
    assert torch.allclose(batched, looped, atol=1e-6)


def _counting(calls, fn):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    return wrapped


@pytest.mark.parametrize(("tree", "window"), [(True, 0), (False, 3)])
def test_fused_extend_runs_long_extends_request_by_request_with_the_same_result(monkeypatch, tree, window):
    """Beyond BATCHED_EXTEND_MAX (a prefill) the fused op attends one request at a time, its tree rows included."""
    import service.kernels.attention_fused as fused

    rng = random.Random(11)
    g = torch.Generator().manual_seed(11)
    k_buffer, v_buffer = _pool(g, 2, torch.float32)
    ext_lens = [rng.randrange(2, 7) for _ in range(3)]
    seq_lens = [e + rng.randrange(0, 12) for e in ext_lens]
    req_to_token = torch.randperm(POOL, generator=g)[: 3 * CONTEXT].view(3, CONTEXT).to(torch.int32)
    trees = [random_parents(rng, e) for e in ext_lens]
    tree_mask = torch.tensor(
        [j in ancestors_with_self(p, i) for p in trees for i in range(len(p)) for j in range(len(p))]
    )
    q = torch.randn(sum(ext_lens), 4, D, generator=g)
    starts = torch.tensor([sum(ext_lens[:b]) for b in range(3)], dtype=torch.int32)
    outs = []
    for longest in (fused.BATCHED_EXTEND_MAX, 1):
        monkeypatch.setattr(fused, "BATCHED_EXTEND_MAX", longest)
        out = torch.zeros(sum(ext_lens), 4, DV)
        fused.extend_attention_fused(
            q, None, None, out, k_buffer, v_buffer, 1.0, 1.0, req_to_token, torch.tensor([2, 0, 1]),
            torch.tensor(seq_lens), torch.tensor(ext_lens), starts, max(ext_lens), 0.3, 0.0, False, window, None,
            None, tree_mask if tree else None, True,
        )  # fmt: skip
        outs.append(out)
    assert torch.allclose(outs[0], outs[1], atol=1e-6)


def test_fused_rows_that_see_no_key_come_out_as_zeros():
    """As the reference's `attend`: a fully masked query row is zeros, not NaN (torch's fused CPU kernel)."""
    from service.kernels.attention_fused import sdpa

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, D, generator=g), torch.randn(2, 5, 2, D, generator=g), torch.randn(2, 5, 2, DV)
    visible = torch.rand(2, 3, 5, generator=g) < 0.6
    visible[0, 1] = False
    out = sdpa(q, k, v, visible, 0.5)
    assert torch.equal(out[0, 1], torch.zeros(4, DV))
    assert torch.isfinite(out).all()
