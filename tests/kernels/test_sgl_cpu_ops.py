"""Registration: every op is reachable through torch.ops.<namespace> with SGLang's positional call shapes (the
attention ops: the default, fused, implementations)."""

import pytest
import torch

from service.kernels.attention_fused import decode_attention_fused, extend_attention_fused
from service.kernels.sgl_cpu_ops import OPS, register_sgl_kernel_cpu_ops

NS = "moe_serve_kernels_test"
EXPECTED = {
    "copy_all_layer_kv_cache_cpu",
    "extend_attention_cpu",
    "decode_attention_cpu",
    "assign_req_to_token_pool_cpu",
    "reconstruct_indices_from_tree_mask_cpu",
    "assign_extend_cache_locs_cpu",
    "verify_tree_greedy_cpu",
    "fill_accept_out_cache_loc_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "build_draft_decode_metadata_cpu",
    "build_tree_kernel_efficient_cpu",
    "fill_bonus_tokens_cpu",
    "rotate_input_ids_cpu",
    "tree_speculative_sampling_target_only_cpu",
    "murmur_hash32_cpu",
}


@pytest.fixture(scope="module")
def ops():
    registered = register_sgl_kernel_cpu_ops(NS)
    assert set(registered) == EXPECTED
    return getattr(torch.ops, NS)


def test_table_names_are_unique_and_complete():
    assert sorted(op.name for op in OPS) == sorted(EXPECTED)


def test_second_registration_is_a_no_op(ops):
    assert register_sgl_kernel_cpu_ops(NS) == []


def test_existing_ops_win():
    ns = "moe_serve_kernels_test_pre"
    lib = torch.library.Library(ns, "DEF")
    lib.define("fill_bonus_tokens_cpu(Tensor a, Tensor b, Tensor(a!) c, int d) -> ()")

    def fill_42(accept_tokens, accept_lens, bonus_tokens, accept_stride):
        bonus_tokens.fill_(42)

    lib.impl("fill_bonus_tokens_cpu", fill_42, "CPU")
    registered = register_sgl_kernel_cpu_ops(ns)
    assert "fill_bonus_tokens_cpu" not in registered and len(registered) == len(EXPECTED) - 1
    out = torch.zeros(2, dtype=torch.int32)
    getattr(torch.ops, ns).fill_bonus_tokens_cpu(
        torch.zeros(2, 2, dtype=torch.int32), torch.ones(2, dtype=torch.int32), out, 2
    )
    assert out.tolist() == [42, 42]


def _attention_inputs(g):
    q = torch.randn(5, 4, 32, generator=g)
    k_buf, v_buf = torch.randn(20, 2, 32, generator=g), torch.randn(20, 2, 32, generator=g)
    req_to_token = torch.arange(40, dtype=torch.int32).view(2, 20) % 20
    return q, k_buf, v_buf, req_to_token


def test_extend_attention_through_dispatcher_like_intel_amx(ops):
    g = torch.Generator().manual_seed(0)
    q, k_buf, v_buf, req_to_token = _attention_inputs(g)
    k, v = torch.randn(5, 2, 32, generator=g), torch.randn(5, 2, 32, generator=g)
    args = [
        req_to_token, torch.tensor([1, 0]), torch.tensor([6, 3]), torch.tensor([3, 2], dtype=torch.int32),
        torch.tensor([0, 3], dtype=torch.int32), 3, 0.17, 0.0, False, -1 + 1, None, None, None, True,
    ]  # fmt: skip
    o = torch.empty(5, 4 * 32)
    ops.extend_attention_cpu(q, k, v, o.view(-1, 4, 32), k_buf, v_buf, 1.0, 1.0, *args)
    direct = torch.empty(5, 4, 32)
    extend_attention_fused(q, k, v, direct, k_buf, v_buf, 1.0, 1.0, *args)
    assert torch.equal(o.view(-1, 4, 32), direct)


def test_decode_attention_through_dispatcher_like_intel_amx(ops):
    g = torch.Generator().manual_seed(1)
    q, k_buf, v_buf, req_to_token = _attention_inputs(g)
    q = q[:2]
    key, value = torch.randn(2, 2, 32, generator=g), torch.randn(2, 2, 32, generator=g)
    loc = torch.tensor([5, 12])
    logits = torch.zeros(2, 4, 8, 33)
    tail = [req_to_token, torch.tensor([0, 1]), torch.tensor([6, 13]), 0.17, 0.0, False, 0, None, None]
    k2, v2 = k_buf.clone(), v_buf.clone()
    o = torch.empty(2, 4 * 32)
    ops.decode_attention_cpu(q, k_buf, v_buf, 1.0, 1.0, o.view(-1, 4, 32), key, value, loc, logits, *tail)
    direct = torch.empty(2, 4, 32)
    decode_attention_fused(q, k2, v2, 1.0, 1.0, direct, key, value, loc, logits, *tail)
    assert torch.equal(o.view(-1, 4, 32), direct)
    assert torch.equal(k_buf[loc], key) and torch.equal(v_buf, v2)


def test_speculative_ops_through_dispatcher(ops):
    # the sgl_kernel 0.4.10 wrappers' positional orders (speculative.py, kvcacheio.py)
    req_to_token = torch.zeros(3, 10, dtype=torch.int32)
    ops.assign_req_to_token_pool_cpu(
        torch.tensor([2, 0]), req_to_token, torch.tensor([1, 0]), torch.tensor([3, 1]), torch.tensor([7, 8, 9]), 10
    )
    assert req_to_token[2, 1:3].tolist() == [7, 8] and req_to_token[0, 0] == 9
    out = torch.empty(3, dtype=torch.int64)
    ops.assign_extend_cache_locs_cpu(
        torch.tensor([2, 0]), req_to_token, torch.tensor([1, 0]), torch.tensor([3, 1]), out, 10
    )
    assert out.tolist() == [7, 8, 9]
    draft = torch.empty(4, dtype=torch.int64)
    ops.assign_draft_cache_locs_contiguous_cpu(torch.tensor([2]), req_to_token, torch.tensor([0]), draft, 10, 2, 2)
    assert draft.tolist() == [0, 7, 8, 0]
    expanded = ops.build_draft_decode_metadata_cpu(req_to_token, torch.tensor([2]), torch.tensor([1]), 2, 1, 10)
    assert expanded.shape == (2, 10) and expanded[:, :2].tolist() == [[0, 7], [0, 8]]
    accepted = torch.empty(3, dtype=torch.int64)
    ops.fill_accept_out_cache_loc_cpu(
        torch.tensor([[0, -1], [2, 3]], dtype=torch.int32), torch.tensor([5, 6, 7, 8]), accepted
    )
    assert accepted.tolist() == [5, 7, 8]
    bonus = torch.empty(2, dtype=torch.int32)
    ops.fill_bonus_tokens_cpu(
        torch.tensor([[1, 2], [3, 4]], dtype=torch.int32), torch.tensor([2, 1], dtype=torch.int32), bonus, 2
    )
    assert bonus.tolist() == [2, 3]
    ids = torch.tensor([1, 2, 3])
    ops.rotate_input_ids_cpu(ids, torch.tensor([0]), torch.tensor([3]), torch.tensor([9]), None)
    assert ids.tolist() == [2, 3, 9]
    data = torch.arange(12, dtype=torch.float32).view(6, 2)
    ops.copy_all_layer_kv_cache_cpu(
        torch.tensor([data.data_ptr()], dtype=torch.uint64), torch.tensor([8]), torch.tensor([5]), torch.tensor([0])
    )
    assert data[5].tolist() == [0.0, 1.0]


def test_tree_ops_through_dispatcher(ops):
    # tree: 0 -> {1, 2}, 1 -> 3 ; built by EAGLE selection, then verified greedily and by sampling
    mask = torch.ones(16, dtype=torch.bool)
    positions = torch.empty(4, dtype=torch.long)
    ri, nt, ns = torch.full((3, 1, 4), -1, dtype=torch.long)
    ops.build_tree_kernel_efficient_cpu(
        torch.tensor([[-1, 0, 1]]),
        torch.tensor([[0, 1, 2]]),
        torch.tensor([5]),
        mask,
        positions,
        ri,
        nt,
        ns,
        2,
        2,
        4,
        1,
    )
    assert nt.tolist() == [[1, 3, -1, -1]] and positions.tolist() == [5, 6, 6, 7]
    positions2 = torch.empty(4, dtype=torch.long)
    ri2, nt2, ns2 = torch.empty((3, 1, 4), dtype=torch.long)
    ops.reconstruct_indices_from_tree_mask_cpu(mask, torch.tensor([5]), positions2, ri2, nt2, ns2, 1, 4)
    assert torch.equal(nt2, nt) and torch.equal(ns2, ns) and torch.equal(positions2, positions)
    candidates = torch.tensor([[0, 11, 12, 13]])
    predicts = torch.zeros(4, dtype=torch.int32)
    accept_index = torch.full((1, 3), -1, dtype=torch.int32)
    accept_num = torch.empty(1, dtype=torch.int32)
    ops.verify_tree_greedy_cpu(
        predicts, accept_index, accept_num, candidates, ri, nt, ns, torch.tensor([[11, 13, 0, 4]])
    )
    assert accept_index.tolist() == [[0, 1, 3]] and accept_num.tolist() == [2] and predicts.tolist() == [11, 13, 0, 4]
    target = torch.nn.functional.one_hot(torch.tensor([[12, 0, 1, 2]]), 16).float()
    predicts.zero_()
    accept_index.fill_(-1)
    ops.tree_speculative_sampling_target_only_cpu(
        predicts, accept_index, accept_num, candidates, ri, nt, ns, torch.full((1, 4), 0.5), torch.tensor([0.5]),
        target, torch.zeros_like(target), 1.0, 1.0, True,
    )  # fmt: skip
    assert accept_index.tolist() == [[0, 2, -1]] and accept_num.tolist() == [1] and predicts[[0, 2]].tolist() == [12, 1]
