"""The decode attention op (service/kernels/csrc/decode_attention.cpp) against its torch reference, on every ISA this
CPU runs and every product form: batches of requests of different lengths (GQA and MHA, head sizes that leave vector
tails), its writes to the K/V pool, and the errors it gives for inputs it cannot take."""

import pytest
import torch

from service.kernels import stream_gemm
from service.kernels.decode_attention import (
    chain_attention,
    chain_attention_reference,
    decode_attention,
    decode_attention_reference,
)


@pytest.fixture(scope="module", autouse=True)
def built():
    assert stream_gemm.load(), stream_gemm.error()


def _case(batch, heads, kv_heads, dim, hidden=48, context=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    slots = batch * context + 8
    lens = torch.randint(1, context + 1, (batch,), generator=g)
    rows = torch.randperm(batch + 3, generator=g)[:batch]  # requests in other rows than their batch order
    req_to_token = torch.zeros(batch + 3, context, dtype=torch.int32)
    free = torch.randperm(slots, generator=g)
    used = 0
    for b in range(batch):  # each request's slots: distinct, in no order
        req_to_token[rows[b], : lens[b]] = free[used : used + lens[b]].int()
        used += int(lens[b])
    loc = torch.stack([req_to_token[rows[b], lens[b] - 1].long() for b in range(batch)])
    return dict(
        h=torch.randn(batch, hidden, generator=g),
        norm_w=torch.rand(hidden, generator=g) + 0.5,
        eps=1e-5,
        qkv_w=torch.randn((heads + 2 * kv_heads) * dim, hidden, generator=g) / hidden**0.5,
        o_w=torch.randn(hidden, heads * dim, generator=g) / (heads * dim) ** 0.5,
        cos_sin_cache=torch.rand(64, dim, generator=g) * 2 - 1,  # cosines then sines, unrelated: a swap shows
        positions=lens - 1,
        k_buffer=torch.randn(slots, kv_heads, dim, generator=g),
        v_buffer=torch.randn(slots, kv_heads, dim, generator=g),
        loc=loc,
        req_to_token=req_to_token,
        pool_rows=rows,
        seq_lens=lens,
        heads=heads,
        kv_heads=kv_heads,
        scale=dim**-0.5,
    )


def _fresh(case):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in case.items()}


@pytest.mark.parametrize(
    ("batch", "heads", "kv_heads", "dim"), [(1, 4, 4, 64), (3, 4, 2, 16), (8, 6, 1, 10), (2, 2, 2, 66)]
)
def test_matches_the_torch_ops_on_every_isa_and_form(batch, heads, kv_heads, dim):
    case = _case(batch, heads, kv_heads, dim, seed=batch * 10 + dim)
    want = _fresh(case)
    expected = decode_attention_reference(**want)
    forms = [(), [stream_gemm.WEIGHT_MAJOR_KIND] * batch] + [[kind] * batch for kind in range(len(stream_gemm.KINDS))]
    for isa in stream_gemm.supported_isas():
        for kinds in forms:
            got = _fresh(case)
            out = decode_attention(**got, kinds_qkv=kinds, kinds_o=kinds, isa=isa)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
            # the new tokens' K (rotated) and V are in their slots, nothing else in the pools changed
            torch.testing.assert_close(got["k_buffer"], want["k_buffer"], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got["v_buffer"], want["v_buffer"], rtol=1e-5, atol=1e-5)
            untouched = torch.ones(case["k_buffer"].shape[0], dtype=torch.bool)
            untouched[case["loc"]] = False
            assert torch.equal(got["k_buffer"][untouched], case["k_buffer"][untouched])


@pytest.mark.parametrize(("batch", "heads", "kv_heads", "dim"), [(3, 4, 2, 16), (8, 6, 1, 10)])
def test_threads_split_the_heads_not_the_result(batch, heads, kv_heads, dim):
    """On two threads (the library's parallel_for over requests x heads, compiled with OpenMP) the op gives the
    bits it gives on one, its output and its K/V writes."""
    case = _case(batch, heads, kv_heads, dim, seed=3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _fresh(case)
        out_one = decode_attention(**one)
        torch.set_num_threads(2)
        assert stream_gemm.threads() == 2
        two = _fresh(case)
        out_two = decode_attention(**two)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out_one, out_two)
    assert torch.equal(one["k_buffer"], two["k_buffer"]) and torch.equal(one["v_buffer"], two["v_buffer"])


def test_the_new_token_is_read_from_its_slot_not_from_the_request_table():
    case = _case(3, 4, 2, 16, seed=7)
    expected = decode_attention_reference(**_fresh(case))
    for b in range(3):  # a draft step's table need not hold the new token's slot yet
        case["req_to_token"][case["pool_rows"][b], case["seq_lens"][b] - 1] = -1
    torch.testing.assert_close(decode_attention(**_fresh(case)), expected, rtol=1e-5, atol=1e-5)


def test_weights_given_as_views_are_read_as_their_values():
    case = _case(2, 4, 2, 16, seed=9)
    expected = decode_attention_reference(**_fresh(case))
    views = _fresh(case)  # every other element of a buffer twice as long, a transposed copy: not contiguous
    views["norm_w"] = torch.stack([case["norm_w"], torch.zeros_like(case["norm_w"])], dim=1).reshape(-1)[::2]
    views["qkv_w"] = case["qkv_w"].t().contiguous().t()
    views["o_w"] = case["o_w"].t().contiguous().t()
    assert not (views["norm_w"].is_contiguous() or views["qkv_w"].is_contiguous() or views["o_w"].is_contiguous())
    torch.testing.assert_close(decode_attention(**views), expected, rtol=1e-5, atol=1e-5)


def test_the_new_token_attends_to_itself():
    case = _case(1, 2, 2, 8, seed=3)
    case["seq_lens"] = torch.tensor([1])  # only its own slot: the output is its own V through o_w
    case["req_to_token"][case["pool_rows"][0], 0] = int(case["loc"][0])
    case["positions"] = torch.tensor([0])
    got = _fresh(case)
    out = decode_attention(**got)
    v_new = got["v_buffer"][case["loc"][0]].reshape(1, -1)
    torch.testing.assert_close(out, case["h"] + v_new @ case["o_w"].t(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(req_to_token=c["req_to_token"].long()), "int32"),
        (lambda c: c.update(seq_lens=c["seq_lens"] + 100), "outside 1.."),
        (lambda c: c.update(loc=c["loc"] + 1000), "outside the pool"),
        (lambda c: c["req_to_token"].__setitem__((c["pool_rows"][0], 0), 5000), "outside the pool"),
        (lambda c: c.update(heads=3), "do not group"),
        (lambda c: c.update(qkv_w=c["qkv_w"][1:]), "does not fit"),
        (lambda c: c.update(h=c["h"].double()), "float32"),
        (lambda c: c.update(positions=c["positions"][:1]), "positions must be"),
    ],
)
def test_bad_input_is_refused_with_the_reason(change, message):
    case = _case(2, 4, 2, 8, seed=5)
    change(case)
    with pytest.raises(RuntimeError, match=message):
        decode_attention(**case)


def _chain_case(exts, heads, kv_heads, dim, hidden=48, context=40, seed=0):
    """Requests with committed prefixes and chains of `exts` new rows each, slots distinct and in no order; the
    table does not hold the new rows' slots (their `loc` does)."""
    g = torch.Generator().manual_seed(seed)
    batch, rows_total = len(exts), sum(exts)
    slots = batch * context + 8
    prefixes = torch.stack([torch.randint(0, context - e + 1, (1,), generator=g)[0] for e in exts])
    rows = torch.randperm(batch + 3, generator=g)[:batch]
    req_to_token = torch.full((batch + 3, context), -1, dtype=torch.int32)
    free = torch.randperm(slots, generator=g)
    used, loc, positions = 0, [], []
    for b, e in enumerate(exts):
        n = int(prefixes[b])
        req_to_token[rows[b], :n] = free[used : used + n].int()
        loc += free[used + n : used + n + e].tolist()
        positions += list(range(n, n + e))
        used += n + e
    return dict(
        h=torch.randn(rows_total, hidden, generator=g),
        norm_w=torch.rand(hidden, generator=g) + 0.5,
        eps=1e-5,
        qkv_w=torch.randn((heads + 2 * kv_heads) * dim, hidden, generator=g) / hidden**0.5,
        o_w=torch.randn(hidden, heads * dim, generator=g) / (heads * dim) ** 0.5,
        cos_sin_cache=torch.rand(64, dim, generator=g) * 2 - 1,
        positions=torch.tensor(positions),
        k_buffer=torch.randn(slots, kv_heads, dim, generator=g),
        v_buffer=torch.randn(slots, kv_heads, dim, generator=g),
        loc=torch.tensor(loc),
        req_to_token=req_to_token,
        pool_rows=rows,
        prefix_lens=prefixes,
        ext_lens=torch.tensor(exts),
        heads=heads,
        kv_heads=kv_heads,
        scale=dim**-0.5,
    )


@pytest.mark.parametrize(
    ("exts", "heads", "kv_heads", "dim"),
    [((1,), 4, 4, 64), ((3, 1, 2), 4, 2, 16), ((5, 4), 6, 1, 10), ((2,), 2, 2, 66)],
)
def test_chains_match_the_torch_ops_on_every_isa_and_form(exts, heads, kv_heads, dim):
    case = _chain_case(exts, heads, kv_heads, dim, seed=sum(exts) * 10 + dim)
    want = _fresh(case)
    expected = chain_attention_reference(**want)
    rows = sum(exts)
    forms = [(), [stream_gemm.WEIGHT_MAJOR_KIND] * rows] + [[kind] * rows for kind in range(len(stream_gemm.KINDS))]
    for isa in stream_gemm.supported_isas():
        for kinds in forms:
            got = _fresh(case)
            out = chain_attention(**got, kinds_qkv=kinds, kinds_o=kinds, isa=isa)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got["k_buffer"], want["k_buffer"], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got["v_buffer"], want["v_buffer"], rtol=1e-5, atol=1e-5)


def test_a_chain_row_sees_the_rows_before_it_not_after():
    """Changing a request's last row changes only that row's output (and the other requests' not at all)."""
    case = _chain_case((3, 2), 4, 2, 16, seed=11)
    base = chain_attention(**_fresh(case))
    changed = _fresh(case)
    changed["h"][2] += 1.0  # request 0's last row
    out = chain_attention(**changed)
    torch.testing.assert_close(out[:2], base[:2], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out[3:], base[3:], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(out[2], base[2])


def test_one_row_chains_are_the_decode_op():
    case = _chain_case((1, 1, 1), 4, 2, 16, seed=13)
    decode = {k: v for k, v in _fresh(case).items() if k not in ("prefix_lens", "ext_lens")}
    for b in range(3):  # the decode op's table holds the committed slots, its new token's slot comes from loc
        decode["req_to_token"][case["pool_rows"][b], case["prefix_lens"][b]] = -1
    decode["seq_lens"] = case["prefix_lens"] + 1
    torch.testing.assert_close(chain_attention(**_fresh(case)), decode_attention(**decode), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(ext_lens=c["ext_lens"] + 1), "add up to"),
        (lambda c: c.update(prefix_lens=c["prefix_lens"] + 100), "does not fit a context"),
        (lambda c: c.update(ext_lens=c["ext_lens"][:1]), "ext_lens must be"),
        (lambda c: c.update(loc=c["loc"] + 1000), "outside the pool"),
    ],
)
def test_bad_chains_are_refused_with_the_reason(change, message):
    case = _chain_case((2, 3), 4, 2, 8, seed=5)
    change(case)
    with pytest.raises(RuntimeError, match=message):
        chain_attention(**case)
