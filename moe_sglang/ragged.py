"""Ragged verify: request i verifies its first L_i draft-tree nodes, L_i = min(K_i, D_i) + 1, in one compact forward.

The drafters build a dense layout, `n` nodes per request (`[bs, n]`: root first, then drafts; parents precede their
children, so the first L nodes of a tree are a tree again). The verify forward runs *compact*: only the L_i kept
nodes of each request, packed one request after another (`T = sum_i L_i` rows), described to SGLang's attention
backends by a `RaggedVerifyLayout` (per-request lengths, start offsets, qo_indptr). Acceptance, the KV move and the
step's result stay dense, as SGLang's verify path expects: the compact logits are scattered back into `[bs * n]` rows
(rows of nodes that were not verified stay zero and are unreachable, because every tree link to a node >= L_i is
cut). This is the pattern of SGLang's own variable-length verify (DSpark: compact forward, dense acceptance).

    dense row of compact row j  =  i * n + t     for the t-th kept node of request i
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def parents_precede_children(tree_mask: torch.Tensor) -> bool:
    """tree_mask [bs, n, n], [b, i, j] = node j is an ancestor of (or is) node i. True when every ancestor has a lower
    index, which is what makes the first L nodes of a tree a tree again (checked, not assumed)."""
    return not bool(torch.triu(tree_mask.bool(), diagonal=1).any())


def verify_layout(lens: list[int] | tuple[int, ...], device: torch.device | str):
    """SGLang's RaggedVerifyLayout of a forward in which request i runs lens[i] tokens (read by its attention backends
    and ours)."""
    from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout

    # One graph tier covering this batch exactly: CPU forwards run eagerly; CUDA-graph tiers are the GPU runner's
    # business (it re-buckets the layout with padded_to_bucket).
    return RaggedVerifyLayout.from_verify_lens(verify_lens_cpu=list(lens), device=device, grid=[sum(lens)])


@dataclass(frozen=True)
class RaggedVerify:
    """Index maps of one step's ragged verify."""

    lens: tuple[int, ...]  # [bs] nodes request i verifies (its root included), 1 <= L_i <= stride
    stride: int  # n: nodes per request in the dense layout
    dense_rows: torch.Tensor  # [T] int64, dense row (i * n + t) of each compact row

    @classmethod
    def from_lens(cls, lens: list[int], stride: int, device: torch.device | str = "cpu") -> RaggedVerify:
        if not lens:
            raise ValueError("a ragged verify needs at least one request")
        if min(lens) < 1 or max(lens) > stride:
            raise ValueError(f"verify lengths must be in [1, {stride}], got {lens}")
        # a few dozen rows, built on the host: five tensor ops with two repeat_interleaves took 80-87 us a call, this
        # 8-19 (batch 1 / 8, one thread, AVX2 EPYC); a verify step builds two
        rows = [i * stride + t for i, count in enumerate(lens) for t in range(count)]
        return cls(tuple(lens), stride, torch.tensor(rows, dtype=torch.int64, device=device))

    @property
    def batch_size(self) -> int:
        return len(self.lens)

    @property
    def total_tokens(self) -> int:  # T: rows of the compact forward
        return sum(self.lens)

    def layout(self, device: torch.device | str):
        """SGLang's description of this verify (read by its attention backends and ours)."""
        return verify_layout(self.lens, device)

    def pack(self, dense: torch.Tensor) -> torch.Tensor:
        """[bs * n, ...] -> [T, ...]: the kept nodes' rows."""
        return dense.reshape(self.batch_size * self.stride, *dense.shape[1:])[self.dense_rows.to(dense.device)]

    def unpack(self, compact: torch.Tensor) -> torch.Tensor:
        """[T, ...] -> [bs * n, ...], zeros in the rows of nodes that were not verified."""
        out = compact.new_zeros(self.batch_size * self.stride, *compact.shape[1:])
        out[self.dense_rows.to(compact.device)] = compact
        return out

    def pack_tree_mask(self, dense_mask: torch.Tensor) -> torch.Tensor:
        """Draft-only mask [bs * n * n] (QLEN layout: row = query node) -> concatenated per-request L_i x L_i
        blocks [sum L_i^2], the layout the CPU extend attention reads per request."""
        n, bs = self.stride, self.batch_size
        lens = torch.tensor(self.lens, device=dense_mask.device)
        inside = torch.arange(n, device=dense_mask.device)[None, :] < lens[:, None]  # [bs, n]
        keep = inside[:, :, None] & inside[:, None, :]  # [bs, n, n], row-major = block after block
        return dense_mask.reshape(bs, n, n)[keep]

    def pack_full_mask(self, prefix_lens: list[int], dense_mask: torch.Tensor) -> torch.Tensor:
        """GPU layout (prefix columns included, as SGLang's NGRAM builds it off CPU): per request L_i x (prefix_i + L_i),
        prefix always visible, then the request's L_i x L_i draft block. Not exercised on CPU (no GPU in CI)."""
        n = self.stride
        blocks = dense_mask.reshape(self.batch_size, n, n)
        parts = []
        for i, (length, prefix) in enumerate(zip(self.lens, prefix_lens, strict=True)):
            ones = torch.ones(length, prefix, dtype=torch.bool, device=dense_mask.device)
            parts.append(torch.cat([ones, blocks[i, :length, :length].bool()], 1).reshape(-1))
        return torch.cat(parts)

    def acceptable(self, accept_lens: tuple[int, ...]) -> torch.Tensor:
        """[T] float: 1 for compact rows whose node request i may accept (t < accept_lens[i]), 0 for rows a wider
        layout verifies only to fill its rectangle (they vote for no expert in the verify budget)."""
        t = torch.arange(self.stride, device=self.dense_rows.device).repeat(self.batch_size)
        caps = torch.tensor(accept_lens, device=t.device).repeat_interleave(self.stride)
        return (t < caps).float()[self.dense_rows]

    def cut_links(self, links: torch.Tensor) -> torch.Tensor:
        """[bs, n] first-child or next-sibling links with every link to a node >= L_i set to -1.

        Children and siblings are linked in increasing node order (SGLang's reconstruct_indices_from_tree_mask), so
        once a link points past L_i every later one does too: cutting it leaves exactly the tree of the kept nodes."""
        lens = torch.tensor(self.lens, device=links.device)[:, None]
        return torch.where(links >= lens, torch.full_like(links, -1), links)
