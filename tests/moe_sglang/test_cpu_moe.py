"""moe_sglang/cpu_moe.py against SGLang's own moe_forward_native on the same layer and routing."""

from types import SimpleNamespace

import pytest
import torch

from moe_sglang import cpu_moe
from service.kernels.small_gemm import FORMS, GemmPlan


def _layer(experts=6, hidden=32, inter=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return SimpleNamespace(
        num_experts=experts,
        w13_weight=torch.randn(experts, 2 * inter, hidden, generator=g) / hidden**0.5,
        w2_weight=torch.randn(experts, hidden, inter, generator=g) / inter**0.5,
    )


def _config(activation="silu"):
    return SimpleNamespace(
        activation=activation, gemm1_alpha=None, gemm1_clamp_limit=None, apply_router_weight_on_input=False
    )


def _routing(tokens, experts, k, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g)
    weights, ids = torch.topk(torch.softmax(logits, -1), k)
    return weights / weights.sum(-1, keepdim=True), ids.to(torch.int32), None


@pytest.fixture
def plan(monkeypatch):
    """A fresh plan (each test tunes it; the reference is what SGLang runs)."""
    tuned = GemmPlan()
    monkeypatch.setattr(cpu_moe, "PLAN", tuned)
    monkeypatch.setattr(cpu_moe, "_ORIGINAL", [])
    monkeypatch.setattr(cpu_moe, "_EXPERTS", [cpu_moe.moe_experts])
    monkeypatch.setattr(cpu_moe, "_KEEP_BF16", [False])
    return tuned


@pytest.mark.parametrize("python_loop", [False, True])  # in one call of the kernel's library / expert by expert
@pytest.mark.parametrize("form", ["weight_major", "stream"])
@pytest.mark.parametrize(("tokens", "k"), [(1, 2), (4, 2), (5, 3), (16, 2)])
def test_matches_sglang_moe_forward_native(plan, tokens, k, form, python_loop):
    from sglang.srt.layers.moe.fused_moe_native import moe_forward_native

    if python_loop:
        cpu_moe._EXPERTS[0] = cpu_moe.moe_experts_python
    layer = _layer(seed=tokens)
    x = torch.randn(tokens, 32, generator=torch.Generator().manual_seed(k))
    topk = _routing(tokens, layer.num_experts, k, seed=tokens + k)
    plan.tune([layer.w13_weight, layer.w2_weight], timer=lambda s, m: {"linear": 1.0, form: 0.5})
    ours = cpu_moe.moe_forward(layer, x, topk, _config())
    torch.testing.assert_close(ours, moe_forward_native(layer, x, topk, _config()), rtol=1e-5, atol=1e-5)


def test_first_forward_tunes_the_layers_shapes(plan, monkeypatch):
    timed = []
    monkeypatch.setattr(
        GemmPlan,
        "tune",
        lambda self, weights, **kw: (
            timed.append([tuple(w.shape) for w in weights])
            or self.forms.update({(o, i, m): FORMS[0] for o, i in ((48, 32), (32, 24)) for m in range(1, 9)})
        ),
    )
    layer = _layer()
    topk = _routing(2, 6, 2, seed=0)
    cpu_moe.moe_forward(layer, torch.randn(2, 32), topk, _config())
    cpu_moe.moe_forward(layer, torch.randn(2, 32), topk, _config())
    assert timed == [[(6, 48, 32), (6, 32, 24)]]  # once


def test_uncovered_cases_go_to_sglang(plan):
    seen = []
    cpu_moe._ORIGINAL.append(lambda *args: seen.append(args) or "sglang")
    layer = _layer()
    topk = _routing(2, 6, 2, seed=1)
    assert cpu_moe.moe_forward(layer, torch.randn(2, 32), topk, _config("gelu")) == "sglang"
    layer.w13_weight_bias = torch.zeros(6, 48)
    assert cpu_moe.moe_forward(layer, torch.randn(2, 32), topk, _config()) == "sglang"
    assert len(seen) == 2 and not plan.forms


@pytest.mark.parametrize(
    ("gemm", "candidates"),
    [
        ("tuned", FORMS),
        ("walks", FORMS[: FORMS.index("stream_amx")]),  # the AMX forms left out
        ("lockstep", ("linear", "weight_major", "stream")),
        ("torch", ("linear", "weight_major")),
        ("unfused", FORMS),
    ],
)
def test_the_setting_decides_which_forms_are_tuned(plan, monkeypatch, gemm, candidates):
    from moe_sglang import touchpoints

    monkeypatch.setattr(touchpoints, "hook", lambda *args: None)
    cpu_moe.install(gemm)
    assert plan.candidates == candidates
    # the whole layer in one call of the kernel's library, except where the settings keep the Python loop
    python_loop = gemm in ("torch", "unfused")
    assert cpu_moe._EXPERTS[0] is (cpu_moe.moe_experts_python if python_loop else cpu_moe.moe_experts)


def test_exact_bf16_narrows_only_weights_that_are_bfloat16_values():
    w = torch.randn(3, 5000, 7).to(torch.bfloat16).float()  # more rows than one chunk
    narrow = cpu_moe.exact_bf16(w)
    assert narrow.dtype == torch.bfloat16 and torch.equal(narrow.float(), w)
    w[2, 4999, 6] += 2.0**-12 * w[2, 4999, 6].abs().clamp(min=1)  # one value below bfloat16's precision, last chunk
    assert cpu_moe.exact_bf16(w) is None


@pytest.mark.parametrize("keep", [True, False])
def test_bfloat16_checkpoint_experts_are_kept_as_bfloat16_and_multiply_alike(plan, keep):
    """A layer whose experts are bfloat16 values (a bfloat16 checkpoint widened by SGLang) is narrowed at its first
    forward where the setting keeps them (install), and gives what SGLang's forward gives on the float32 copy."""
    from sglang.srt.layers.moe.fused_moe_native import moe_forward_native

    cpu_moe._KEEP_BF16[0] = keep
    layer = _layer(seed=3)
    layer.w13_weight = layer.w13_weight.to(torch.bfloat16).float()
    layer.w2_weight = layer.w2_weight.to(torch.bfloat16).float()
    wide = _layer(seed=3)
    wide.w13_weight, wide.w2_weight = layer.w13_weight.clone(), layer.w2_weight.clone()
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))
    topk = _routing(5, layer.num_experts, 2, seed=4)
    plan.tune([layer.w13_weight, layer.w2_weight], timer=lambda s, m: {"linear": 1.0, "stream": 0.5}, inputs=x.dtype)
    ours = cpu_moe.moe_forward(layer, x, topk, _config())
    want = torch.bfloat16 if keep else torch.float32
    assert layer.w13_weight.dtype == layer.w2_weight.dtype == want
    torch.testing.assert_close(ours, moe_forward_native(wide, x, topk, _config()), rtol=1e-5, atol=1e-5)
    cpu_moe._ORIGINAL.append(moe_forward_native)  # as install() leaves it: the layer is then the library's to run
    kinds = cpu_moe.stream_kinds(layer, _config())
    assert kinds is not None and all(k >= 0 for k in kinds[0] + kinds[1])  # the decode op gets the stream walks


def test_experts_that_are_not_bfloat16_values_stay_float32(plan):
    cpu_moe._KEEP_BF16[0] = True
    layer = _layer(seed=5)  # random float32 values
    plan.tune([layer.w13_weight, layer.w2_weight], timer=lambda s, m: {"linear": 1.0, "stream": 0.5})
    cpu_moe.moe_forward(layer, torch.randn(2, 32), _routing(2, layer.num_experts, 2, seed=6), _config())
    assert layer.w13_weight.dtype == torch.float32


@pytest.mark.parametrize(
    ("gemm", "weights", "keep"),
    [
        ("tuned", "bf16-exact", True),
        ("tuned", "float32", False),
        ("torch", "bf16-exact", False),
        ("unfused", "bf16-exact", False),
    ],
)
def test_the_settings_decide_whether_bfloat16_is_kept(plan, monkeypatch, gemm, weights, keep):
    from moe_sglang import touchpoints

    monkeypatch.setattr(touchpoints, "hook", lambda *args: None)
    cpu_moe.install(gemm, weights)
    assert cpu_moe._KEEP_BF16[0] is keep
