"""bench/gpu_evidence.py's and bench/_gpu_moe.py's pure helpers on CPU: MoESD's N(t), the bandwidth-limit arithmetic, the budget mask and expert
counters its CUDA graph captures (checked here against the oracle and a Python count), the torch baseline, and the goals.
No Triton: the kernels themselves run only in the script (GPU, or TRITON_INTERPRET=1 for its dry run)."""

import pytest
import torch

from bench import _gpu_moe, gpu_evidence
from service.kernels import moe_ref
from service.kernels.triton.expert_blocks import sort_slots_by_expert


def test_the_n_of_t_it_reports_is_moesd_s():
    assert gpu_evidence.expected_experts(1, 64, 8) == pytest.approx(8)
    assert gpu_evidence.expected_experts(16, 64, 8) == pytest.approx(64 * (1 - (56 / 64) ** 16))
    assert gpu_evidence.expected_experts(10_000, 8, 2) == pytest.approx(8)


def test_bandwidth_limit_reads_each_touched_expert_once():
    shape = _gpu_moe.Shape("toy", experts=4, top_k=2, hidden=8, inter=4, renormalize=False)
    assert shape.expert_bytes(2) == (2 * 4 * 8 + 8 * 4) * 2  # w13 [2I, H] + w2 [H, I] in bf16
    assert _gpu_moe.limit_ms(3 * 192, bandwidth=576e3) == pytest.approx(1.0)  # 576 B at 576 kB/s
    assert _gpu_moe.limit_ms(192, bandwidth=None) is None
    assert _gpu_moe.ratio(1.5, 1.0) == 1.5 and _gpu_moe.ratio(1.5, None) is None


@pytest.mark.parametrize("budget", [1, 2, 3, 5, 6])
def test_budget_mask_read_from_a_tensor_matches_the_oracle(budget):
    probs = torch.softmax(torch.randn(5, 6, generator=torch.Generator().manual_seed(budget)), -1)  # [T, E]
    probs[:, 4] = probs[:, 1]  # a tie: both must keep the lower id first
    want = moe_ref.select_budget_experts(probs, budget)
    assert torch.equal(_gpu_moe.budget_mask(probs, torch.tensor(budget)), want)


def test_expert_counters_match_a_python_count():
    ids = torch.tensor([[0, 3], [3, 5], [5, 0], [7, 3]])  # [T, k]
    mask = torch.tensor([True, False, True, True, False, True, False, False])  # drops expert 7
    counted = len({e for e in ids.reshape(-1).tolist() if mask[e]})
    assert counted == 3
    assert int(_gpu_moe.touched_experts(ids, mask)) == counted
    for block_m in (1, 2, 16):
        assert int(_gpu_moe.kernel_experts(ids, mask, 8, block_m, sort_slots_by_expert)) == counted
    nothing = torch.zeros(8, dtype=torch.bool)
    assert (
        int(_gpu_moe.touched_experts(ids, nothing))
        == int(_gpu_moe.kernel_experts(ids, nothing, 8, 4, sort_slots_by_expert))
        == 0
    )


def test_torch_loop_baseline_matches_the_oracle():
    plan = _gpu_moe.make_plan("cpu", quick=True)
    layer = _gpu_moe.make_layer(plan.shapes[0], plan)
    batch = _gpu_moe.make_batch(layer, 6)
    for mask in (None, batch.mask):
        got = _gpu_moe.torch_loop(layer, batch.x, batch.ids, batch.weights, mask)
        want = moe_ref.moe_forward(batch.x, layer.w13, layer.w2, batch.ids, batch.weights, mask)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_goals_say_pass_miss_and_skip():
    plan = _gpu_moe.make_plan("cpu", quick=True)
    name = plan.shapes[0].name
    cost = [
        {"shape": name, "tokens": 4, "ratio_full": 1.2, "best_ratio": 1.1, "gemm_ratio": 1.6},
        {"shape": name, "tokens": 16, "saving": 0.4, "bytes_saving": 0.5},
    ]
    statuses = [g["status"] for g in gpu_evidence.goals(plan, [{"ok": True}, {"ok": False}], cost)]
    # correct (one case failed), budget saving, first shape's three ratios, second shape's three (no rows)
    assert statuses == ["MISS", "PASS", "PASS", "PASS", "MISS", "SKIP", "SKIP", "SKIP"]
