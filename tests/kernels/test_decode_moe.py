"""The decode MoE op (service/kernels/csrc/decode_moe.cpp) against its torch reference, on every ISA this CPU runs and
every product form: routing (ids exactly, weights to rounding), the sublayer's output with the residual, routers with
and without renormalization, and the errors it gives for inputs it cannot take."""

import pytest
import torch

from service.kernels import stream_gemm
from service.kernels.decode_moe import decode_moe, decode_moe_reference


@pytest.fixture(scope="module", autouse=True)
def built():
    assert stream_gemm.load(), stream_gemm.error()


def _case(tokens, experts, top_k, hidden=40, inter=24, renormalize=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(
        h=torch.randn(tokens, hidden, generator=g),
        norm_w=torch.rand(hidden, generator=g) + 0.5,
        eps=1e-5,
        router_w=torch.randn(experts, hidden, generator=g),  # logits of a few units: distinct top-k margins
        top_k=top_k,
        renormalize=renormalize,
        renorm_eps=1e-20,
        w13=torch.randn(experts, 2 * inter, hidden, generator=g) / hidden**0.5,
        w2=torch.randn(experts, hidden, inter, generator=g) / inter**0.5,
    )


def _forms(rows):
    return [(), [stream_gemm.WEIGHT_MAJOR_KIND] * rows] + [[kind] * rows for kind in range(len(stream_gemm.KINDS))]


@pytest.mark.parametrize(
    ("tokens", "experts", "top_k", "renormalize"),
    [(1, 32, 4, True), (3, 8, 2, True), (8, 64, 8, False), (5, 6, 6, True)],
)
def test_matches_the_torch_ops_on_every_isa_and_form(tokens, experts, top_k, renormalize):
    case = _case(tokens, experts, top_k, renormalize=renormalize, seed=tokens * 100 + experts)
    want, want_weights, want_ids = decode_moe_reference(**case)
    for isa in stream_gemm.supported_isas():
        for kinds in _forms(tokens):
            out, weights, ids = decode_moe(**case, kinds_router=kinds, kinds13=kinds, kinds2=kinds, isa=isa)
            assert ids.dtype == torch.int64 and torch.equal(ids, want_ids), (isa, kinds)
            torch.testing.assert_close(weights, want_weights, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


def test_renormalized_weights_sum_to_one_and_plain_ones_to_the_kept_mass():
    case = _case(4, 16, 3, seed=3)
    _, weights, _ = decode_moe(**case)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))
    case["renormalize"] = False
    _, plain, ids = decode_moe(**case)
    x = case["h"] * torch.rsqrt(case["h"].pow(2).mean(-1, keepdim=True) + case["eps"]) * case["norm_w"]
    probs = (x @ case["router_w"].t()).softmax(-1)
    torch.testing.assert_close(plain, probs.gather(1, ids), rtol=1e-5, atol=1e-6)
    assert bool((plain[:, :-1] >= plain[:, 1:]).all())  # in decreasing order


def test_the_renormalization_epsilon_is_added_to_the_kept_sum():
    case = dict(_case(3, 16, 4, seed=4), renorm_eps=0.25)  # large enough to move every weight
    _, weights, ids = decode_moe(**case)
    torch.testing.assert_close(weights, decode_moe_reference(**case)[1], rtol=1e-5, atol=1e-6)
    x = case["h"] * torch.rsqrt(case["h"].pow(2).mean(-1, keepdim=True) + case["eps"]) * case["norm_w"]
    kept = (x @ case["router_w"].t()).softmax(-1).gather(1, ids)
    torch.testing.assert_close(weights, kept / (kept.sum(-1, keepdim=True) + 0.25), rtol=1e-5, atol=1e-6)


def test_the_residual_is_added_and_the_input_is_left_alone():
    case = _case(2, 8, 2, seed=5)
    before = case["h"].clone()
    out, _, _ = decode_moe(**case)
    assert torch.equal(case["h"], before)
    zeroed = dict(case, w2=torch.zeros_like(case["w2"]))  # experts that output nothing: out is the residual
    assert torch.equal(decode_moe(**zeroed)[0], before)
    assert not torch.allclose(out, before)


def test_weights_given_as_views_are_read_as_their_values():
    case = _case(3, 16, 4, seed=9)
    want = decode_moe_reference(**case)[0]
    views = dict(case)
    views["norm_w"] = torch.stack([case["norm_w"], torch.zeros_like(case["norm_w"])], dim=1).reshape(-1)[::2]
    views["router_w"] = case["router_w"].t().contiguous().t()
    views["h"] = torch.stack([case["h"], torch.zeros_like(case["h"])], dim=1)[:, 0]
    assert not (views["norm_w"].is_contiguous() or views["router_w"].is_contiguous() or views["h"].is_contiguous())
    torch.testing.assert_close(decode_moe(**views)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(top_k=0), "top_k 0 outside"),
        (lambda c: c.update(top_k=9), "top_k 9 outside"),
        (lambda c: c.update(router_w=c["router_w"][:, 1:]), "router weight"),
        (lambda c: c.update(w13=c["w13"][1:]), "do not fit"),
        (lambda c: c.update(w2=c["w2"][:, :, 1:]), "do not fit"),
        (lambda c: c.update(h=c["h"].double()), "float32"),
        (lambda c: c.update(w13=c["w13"].to(torch.bfloat16)), "float32 or both bfloat16"),
        (lambda c: c.update(norm_w=c["norm_w"][1:]), "norm weight"),
        (lambda c: c.update(h=c["h"][:0]), "must be \\[T, hidden\\]"),
    ],
)
def test_bad_input_is_refused_with_the_reason(change, message):
    case = _case(2, 8, 2, seed=11)
    change(case)
    with pytest.raises(RuntimeError, match=message):
        decode_moe(**case)


def test_an_unknown_product_form_is_refused():
    case = _case(2, 8, 2, seed=13)
    with pytest.raises(RuntimeError, match="unknown kind"):
        decode_moe(**case, kinds13=[99, 99])


@pytest.mark.parametrize("tokens", [1, 3, 8])
def test_bfloat16_expert_weights_give_their_float32_values_products(tokens):
    """Expert weights kept as bfloat16 (cpu_moe: a bfloat16 checkpoint's) are widened to the same float32 in the
    kernel: the op's output equals the one on their float32 copy bit for bit, in every form."""
    case = _case(tokens, 16, 4, seed=tokens)
    narrow = dict(case, w13=case["w13"].to(torch.bfloat16), w2=case["w2"].to(torch.bfloat16))
    wide = dict(case, w13=narrow["w13"].float(), w2=narrow["w2"].float())
    for isa in stream_gemm.supported_isas():
        for kinds in _forms(tokens):
            got = decode_moe(**narrow, kinds_router=kinds, kinds13=kinds, kinds2=kinds, isa=isa)
            want = decode_moe(**wide, kinds_router=kinds, kinds13=kinds, kinds2=kinds, isa=isa)
            assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), (isa, kinds)
