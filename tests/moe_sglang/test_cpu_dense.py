"""moe_sglang/cpu_dense.py against SGLang's own dense products (UnquantizedLinearMethod.apply and
LogitsProcessor._compute_lm_head) on the same weights."""

from types import SimpleNamespace

import pytest
import torch

from moe_sglang import cpu_dense
from service.kernels.small_gemm import AMX_FORMS, STREAM_FORMS, GemmPlan


@pytest.fixture
def plan(monkeypatch):
    tuned = GemmPlan(max_rows=8)
    monkeypatch.setattr(cpu_dense, "PLAN", tuned)
    return tuned


def _weight(out_features=96, in_features=64, seed=0):
    return torch.randn(out_features, in_features, generator=torch.Generator().manual_seed(seed)) / in_features**0.5


def _sglang_linear():
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod

    return UnquantizedLinearMethod(), UnquantizedLinearMethod.apply


def _processor(**changes):
    return SimpleNamespace(**({"use_fp32_lm_head": False, "rl_on_policy_target": None} | changes))


def _recorder(calls):
    return lambda *args, **kwargs: calls.append(args) or "sglang"


def _spy(original, calls):
    def wrapped(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    return wrapped


# the dense weights are float32: the AMX forms (bfloat16 weights only) are never timed for them
@pytest.mark.parametrize("form", tuple(f for f in STREAM_FORMS if f not in AMX_FORMS) + ("weight_major",))
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_a_planned_linear_layer_is_sglangs_product(plan, form, rows):
    method, apply = _sglang_linear()
    layer = SimpleNamespace(weight=_weight(seed=rows))
    plan.tune([layer.weight], timer=lambda s, m: {"linear": 1.0, form: 0.5})
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(7))
    calls = []
    ours = cpu_dense.linear_apply(_spy(apply, calls), method, layer, x)
    assert not calls  # the planned form ran, not SGLang's
    torch.testing.assert_close(ours, apply(method, layer, x), rtol=1e-5, atol=1e-5)


def test_linear_products_the_plan_does_not_cover_go_to_sglang(plan):
    method = object()
    layer = SimpleNamespace(weight=_weight())
    plan.tune([layer.weight], timer=lambda s, m: {"linear": 1.0, "stream_seq": 0.5 if m < 4 else 2.0})
    packed = SimpleNamespace(weight=layer.weight, use_intel_amx_backend=True)  # AMX-packed: SGLang's kernel
    cases = [
        (layer, torch.randn(2, 64), torch.zeros(96)),  # a bias
        (layer, torch.randn(1, 2, 64), None),  # not 2-D
        (layer, torch.randn(9, 64), None),  # more rows than the plan tunes
        (layer, torch.randn(5, 64), None),  # the plan keeps torch's product there
        (layer, torch.randn(2, 64, dtype=torch.float64), None),  # not float32
        (packed, torch.randn(2, 64), None),
    ]
    for case_layer, x, bias in cases:
        calls = []
        out = cpu_dense.linear_apply(_recorder(calls), method, case_layer, x, bias)
        assert out == "sglang" and calls == [(method, case_layer, x, bias)], (tuple(x.shape), x.dtype)


def test_the_first_product_of_a_shape_tunes_it_once(plan, monkeypatch):
    tuned = []
    monkeypatch.setattr(
        GemmPlan,
        "tune",
        lambda self, weights, **kw: (
            tuned.append([tuple(w.shape) for w in weights])
            or self.forms.update({(96, 64, m): "stream_seq" for m in range(1, 9)})
        ),
    )
    method, apply = _sglang_linear()
    layer = SimpleNamespace(weight=_weight())
    for rows in (1, 2, 1):
        cpu_dense.linear_apply(apply, method, layer, torch.randn(rows, 64))
    assert len(tuned) == 1 and tuned[0][0][-2:] == (96, 64)


@pytest.mark.parametrize("rows", [1, 4])
def test_a_planned_lm_head_is_sglangs_logits(plan, rows):
    from sglang.srt.layers.logits_processor import LogitsProcessor

    head = SimpleNamespace(weight=_weight(out_features=200, seed=3), quant_method=None)
    plan.tune([head.weight], timer=lambda s, m: {"linear": 1.0, "stream_seq": 0.5})
    hidden = torch.randn(rows, 64, generator=torch.Generator().manual_seed(rows))
    calls = []
    ours = cpu_dense.compute_lm_head(_spy(LogitsProcessor._compute_lm_head, calls), _processor(), hidden, head)
    assert not calls
    expected = LogitsProcessor._compute_lm_head(_processor(), hidden, head)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("processor", "head_changes"),
    [
        (_processor(use_fp32_lm_head=True), {}),
        (_processor(rl_on_policy_target="x"), {}),
        (_processor(), {"set_lora": None, "apply_lora": None}),
        (_processor(), {"use_intel_amx_backend": True}),
        (_processor(), {"quant_method": SimpleNamespace(apply=lambda *a: "quantised")}),
    ],
)
def test_lm_heads_off_sglangs_plain_path_go_to_sglang(plan, processor, head_changes):
    weight = _weight(out_features=200, seed=3)
    plan.tune([weight], timer=lambda s, m: {"linear": 1.0, "stream_seq": 0.5})
    head = SimpleNamespace(**({"weight": weight, "quant_method": None} | head_changes))
    calls = []
    cpu_dense.compute_lm_head(lambda *a, **k: calls.append(a) or "sglang", processor, torch.randn(1, 64), head)
    assert len(calls) == 1


def test_install_hooks_both_products_from_the_inventory(plan, monkeypatch):
    from moe_sglang import touchpoints

    hooked = []
    monkeypatch.setattr(touchpoints, "hook", lambda target, fn, kind: hooked.append((target, fn, kind)))
    cpu_dense.install(("linear", "stream_seq"))
    assert hooked == [
        (cpu_dense.LINEAR, cpu_dense.linear_apply, "around"),
        (cpu_dense.LM_HEAD, cpu_dense.compute_lm_head, "around"),
    ]
    assert plan.candidates == ("linear", "stream_seq")
    assert {cpu_dense.LINEAR, cpu_dense.LM_HEAD} <= set(touchpoints.by_target())
