"""Ragged verify index maps, and the compact verify forward's attention == the dense one on the rows it keeps."""

import pytest
import torch

from moe_sglang.ragged import RaggedVerify, parents_precede_children
from service.kernels.attention_cpu import extend_attention_cpu


def test_dense_rows_follow_the_lengths():
    rv = RaggedVerify.from_lens([1, 3, 2], stride=4)
    assert rv.dense_rows.tolist() == [0, 4, 5, 6, 8, 9]
    assert rv.total_tokens == 6 and rv.batch_size == 3


@pytest.mark.parametrize("lens", [[0, 2], [5, 1], []])
def test_lengths_out_of_range_are_refused(lens):
    with pytest.raises(ValueError):
        RaggedVerify.from_lens(lens, stride=4)


def test_pack_and_unpack_rows():
    rv = RaggedVerify.from_lens([2, 1], stride=3)
    dense = torch.arange(6 * 2).reshape(6, 2)
    compact = rv.pack(dense)
    assert compact.tolist() == [[0, 1], [2, 3], [6, 7]]
    back = rv.unpack(compact)
    assert back[[0, 1, 3]].tolist() == dense[[0, 1, 3]].tolist()
    assert back[[2, 4, 5]].abs().sum() == 0, "rows that were not verified stay zero"


def test_tree_mask_blocks_are_each_requests_top_left_corner():
    n = 3
    dense = torch.rand(2, n, n) > 0.5
    rv = RaggedVerify.from_lens([2, 3], stride=n)
    packed = rv.pack_tree_mask(dense.reshape(-1))
    assert packed.tolist() == dense[0, :2, :2].reshape(-1).tolist() + dense[1].reshape(-1).tolist()


def test_gpu_mask_puts_the_prefix_before_each_block():
    rv = RaggedVerify.from_lens([1, 2], stride=2)
    dense = torch.tensor([[1, 0], [1, 1], [1, 0], [1, 1]], dtype=torch.bool).reshape(-1)
    full = rv.pack_full_mask([3, 1], dense)
    assert full.tolist() == [True] * 3 + [True] + [True, True, False, True, True, True]


def test_links_to_unverified_nodes_are_cut():
    rv = RaggedVerify.from_lens([2, 4], stride=4)
    links = torch.tensor([[1, 2, 3, -1], [1, 2, 3, -1]])
    assert rv.cut_links(links).tolist() == [[1, -1, -1, -1], [1, 2, 3, -1]]


def test_acceptable_rows_of_a_wider_forward():
    forward = RaggedVerify.from_lens([3, 3], stride=4)  # rectangular: 3 rows each
    assert forward.acceptable((1, 3)).tolist() == [1, 0, 0, 1, 1, 1]


def test_parent_order_check():
    chain = torch.tril(torch.ones(1, 3, 3, dtype=torch.bool))
    assert parents_precede_children(chain)
    assert not parents_precede_children(chain.transpose(1, 2))


@pytest.mark.sglang
def test_layout_is_sglangs_with_these_lengths():
    layout = RaggedVerify.from_lens([1, 3, 2], stride=4).layout("cpu")
    assert layout.verify_lens.tolist() == [1, 3, 2]
    assert layout.extend_start_loc.tolist() == [0, 1, 4]
    assert layout.qo_indptr_device.tolist() == [0, 1, 4, 6]
    assert layout.total_verify_tokens == 6


def _random_tree(n: int, gen: torch.Generator) -> torch.Tensor:
    """[n, n] ancestor-or-self mask of a random tree in which parents precede children."""
    mask = torch.eye(n, dtype=torch.bool)
    for node in range(1, n):
        parent = int(torch.randint(0, node, (1,), generator=gen))
        mask[node] = mask[parent]
        mask[node, node] = True
    return mask


def test_compact_attention_equals_dense_on_the_kept_rows():
    """The CPU verify forward over the first L_i nodes (ragged) gives each kept node the attention output it gets
    in the full [bs, n] verify: a node sees only its ancestors, which precede it and are kept."""
    gen = torch.Generator().manual_seed(0)
    bs, n, heads, kv_heads, dim = 3, 5, 4, 2, 8
    prefixes, lens = [4, 0, 7], [2, 5, 1]
    pool = 64
    k_buf, v_buf = torch.randn(pool, kv_heads, dim, generator=gen), torch.randn(pool, kv_heads, dim, generator=gen)
    req_to_token = torch.randperm(pool, generator=gen)[: bs * 16].reshape(bs, 16)
    seq = torch.tensor(prefixes)
    q = torch.randn(bs * n, heads, dim, generator=gen)
    k_new, v_new = torch.randn(bs * n, kv_heads, dim, generator=gen), torch.randn(bs * n, kv_heads, dim, generator=gen)
    tree = torch.stack([_random_tree(n, gen) for _ in range(bs)]).reshape(-1)

    def run(rv: RaggedVerify) -> torch.Tensor:
        rows = rv.dense_rows
        out = torch.empty(len(rows), heads, dim)
        extend = torch.tensor(rv.lens)
        extend_attention_cpu(
            q[rows],
            k_new[rows],
            v_new[rows],
            out,
            k_buf,
            v_buf,
            1.0,
            1.0,
            req_to_token,
            torch.arange(bs),
            seq + extend,
            extend,
            torch.cumsum(extend, 0) - extend,
            None,
            dim**-0.5,
            None,
            False,
            0,
            None,
            None,
            rv.pack_tree_mask(tree),
            True,
        )
        return out

    dense = run(RaggedVerify.from_lens([n] * bs, n))
    ragged = RaggedVerify.from_lens(lens, n)
    torch.testing.assert_close(run(ragged), dense[ragged.dense_rows])
