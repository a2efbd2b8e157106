"""Cache-location ops vs per-element Python loops over random pools (several seeds and sizes)."""

import pytest
import torch

from service.kernels.cache_locs import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    build_draft_decode_metadata_cpu,
    fill_accept_out_cache_loc_cpu,
)

CASES = [(0, 1, 16), (1, 3, 32), (2, 5, 64), (3, 8, 40), (4, 13, 48)]  # (seed, bs, pool_len): both sides of SMALL_BATCH


def _pool(seed: int, bs: int, pool_len: int):
    g = torch.Generator().manual_seed(seed)
    max_reqs = bs + 3
    req_to_token = torch.randint(0, 10_000, (max_reqs, pool_len), generator=g, dtype=torch.int32)
    rpi = torch.randperm(max_reqs, generator=g)[:bs]
    start = torch.randint(0, pool_len // 2, (bs,), generator=g)
    end = start + torch.randint(0, pool_len // 2, (bs,), generator=g)
    return g, req_to_token, rpi, start, end


@pytest.mark.parametrize(("seed", "bs", "pool_len"), CASES)
@pytest.mark.parametrize("offset_dtype", [torch.int32, torch.int64])
def test_assign_req_to_token_pool_matches_loop(seed, bs, pool_len, offset_dtype):
    g, table, rpi, start, end = _pool(seed, bs, pool_len)
    total = int((end - start).sum())
    locs = torch.randint(0, 10_000, (total,), generator=g)
    expected = table.clone()
    k = 0
    for i in range(bs):
        for j in range(int(start[i]), int(end[i])):
            expected[rpi[i], j] = int(locs[k])
            k += 1
    assign_req_to_token_pool_cpu(rpi, table, start.to(offset_dtype), end.to(offset_dtype), locs, pool_len)
    assert torch.equal(table, expected)


@pytest.mark.parametrize(("seed", "bs", "pool_len"), CASES)
def test_assign_extend_cache_locs_matches_loop(seed, bs, pool_len):
    _, table, rpi, start, end = _pool(seed, bs, pool_len)
    expected = [int(table[rpi[i], j]) for i in range(bs) for j in range(int(start[i]), int(end[i]))]
    out = torch.full((len(expected),), -7, dtype=torch.int64)
    assign_extend_cache_locs_cpu(rpi, table, start, end, out, pool_len)
    assert out.tolist() == expected


@pytest.mark.parametrize(("seed", "bs", "pool_len"), CASES)
@pytest.mark.parametrize(("topk", "steps"), [(1, 3), (2, 2), (4, 3)])
def test_assign_draft_cache_locs_contiguous_matches_loop(seed, bs, pool_len, topk, steps):
    _, table, rpi, start, _ = _pool(seed, bs, pool_len)
    seq_lens = start.clamp_max(pool_len - topk * steps)
    out = torch.empty(bs * topk * steps, dtype=torch.int64)
    assign_draft_cache_locs_contiguous_cpu(rpi, table, seq_lens, out, pool_len, topk, steps)
    expected = [int(table[rpi[i], int(seq_lens[i]) + j]) for i in range(bs) for j in range(topk * steps)]
    assert out.tolist() == expected


@pytest.mark.parametrize(("seed", "bs", "pool_len"), CASES)
@pytest.mark.parametrize(("topk", "steps"), [(1, 3), (2, 2), (4, 3)])
def test_build_draft_decode_metadata_matches_loop(seed, bs, pool_len, topk, steps):
    _, table, rpi, start, _ = _pool(seed, bs, pool_len)
    seq_lens = start.clamp_max(pool_len - topk * steps)
    out = build_draft_decode_metadata_cpu(table, rpi, seq_lens, topk, steps, pool_len)
    assert out.shape == (bs * topk, pool_len) and out.dtype == torch.int32
    for b in range(bs):
        sl = int(seq_lens[b])
        for k in range(topk):
            row = out[b * topk + k]
            assert row[:sl].tolist() == table[rpi[b], :sl].tolist()
            draft = [int(table[rpi[b], sl + k * steps + s]) for s in range(steps)]
            assert row[sl : sl + steps].tolist() == draft


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_fill_accept_out_cache_loc_compacts_accepted(seed, index_dtype):
    g = torch.Generator().manual_seed(seed)
    bs, steps, n = 4, 3, 5
    accept = torch.randint(0, bs * n, (bs, steps), generator=g)
    accept[torch.rand(bs, steps, generator=g) < 0.4] = -1
    locs = torch.randint(0, 1000, (bs * n,), generator=g)
    expected = [int(locs[i]) for i in accept.flatten().tolist() if i >= 0]
    out = torch.full((len(expected),), -1, dtype=torch.int64)
    fill_accept_out_cache_loc_cpu(accept.to(index_dtype), locs, out)
    assert out.tolist() == expected


def test_wrong_table_dtype_is_a_clear_error():
    table = torch.zeros(2, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="req_to_token"):
        assign_extend_cache_locs_cpu(
            torch.tensor([0]), table, torch.tensor([0]), torch.tensor([1]), torch.empty(1, dtype=torch.int64), 4
        )
