"""Lossless stochastic tree verification with deterministic drafts ("target only" speculative sampling).

Per request, with one uniform coin u per accepted node: the children c1, c2, ... of the last accepted node are tried in
sibling order and ck is accepted when u <= (p(c1) + ... + p(ck)) / threshold_acc or p(ck) >= threshold_single, where p
is the target distribution at that node. With both thresholds 1 this is inverse-CDF sampling of p restricted to the
children, so a child is emitted with exactly its target probability (Leviathan et al. 2023 and Chen et al. 2023 with a
point-mass draft; SpecInfer's multi-candidate form for siblings). When every child is rejected, the next token is drawn
from p with the rejected children removed and renormalised (the residual max(p - q, 0) with q = the rejected mass), so
the emitted token still follows p. When num_spec_step - 1 drafts were accepted, the bonus token is drawn from p itself.
"""

import torch

from service.kernels._checks import require, require_dtype


def _inverse_cdf(weights: torch.Tensor, coin: float) -> int:
    """Smallest index whose cumulative weight exceeds coin * total (weights need not be normalised)."""
    # weights: [vocab]
    cdf = torch.cumsum(weights.double(), 0)
    index = int(torch.searchsorted(cdf, coin * cdf[-1], right=True))
    # coin*total may round onto the last edge: fall back to the last token with weight
    nonzero = torch.nonzero(weights > 0)
    return min(index, int(nonzero[-1])) if nonzero.numel() else 0


def tree_speculative_sampling_target_only_cpu(
    predicts: torch.Tensor,  # [bs*n] int32, written at accepted nodes
    accept_index: torch.Tensor,  # [bs, num_spec_step] int32, written (caller pre-fills -1)
    accept_token_num: torch.Tensor,  # [bs] int32, written: accepted drafts, bonus excluded
    candidates: torch.Tensor,  # [bs, n] draft tokens
    retrive_index: torch.Tensor,  # [bs, n] flat slot of each node
    retrive_next_token: torch.Tensor,  # [bs, n] first child, -1 = none
    retrive_next_sibling: torch.Tensor,  # [bs, n] next sibling, -1 = none
    uniform_samples: torch.Tensor,  # [bs, n] coins in [0, 1), one per tree node
    uniform_samples_for_final_sampling: torch.Tensor,  # [bs] coins for the bonus / residual draw
    target_probs: torch.Tensor,  # [bs, n, vocab] target distribution at each node
    draft_probs: torch.Tensor,  # [bs, n, vocab]; written: rejected children's target mass (the residual's q)
    threshold_single: float,
    threshold_acc: float,
    deterministic: bool,
) -> None:
    del deterministic  # CPU reductions here are sequential, hence deterministic anyway
    op = "tree_speculative_sampling_target_only_cpu"
    for name, t in (("predicts", predicts), ("accept_index", accept_index), ("accept_token_num", accept_token_num)):
        require_dtype(t, (torch.int32,), op, name)
    bs, n = candidates.shape
    require(target_probs.shape[:2] == (bs, n), op, f"target_probs must be [{bs}, {n}, vocab]")
    require(draft_probs.shape == target_probs.shape, op, "draft_probs must have target_probs' shape")
    require(threshold_acc > 0, op, "threshold_acc must be positive")
    num_spec_step = accept_index.shape[1]
    cand = candidates.tolist()
    ri, nxt, sib = retrive_index.tolist(), retrive_next_token.tolist(), retrive_next_sibling.tolist()
    coins = uniform_samples.reshape(bs, n).tolist()
    final_coins = uniform_samples_for_final_sampling.reshape(-1).tolist()
    probs = target_probs.float()
    counts = []
    for b in range(bs):
        node, last, coin = 0, ri[b][0], coins[b][0]
        accept_index[b, 0] = last
        accepted = 0
        for _ in range(1, num_spec_step):
            child = nxt[b][node]
            mass = 0.0
            while child != -1:
                token = cand[b][child]
                p_single = float(probs[b, node, token])
                mass += p_single
                if coin <= mass / threshold_acc or p_single >= threshold_single:
                    break
                draft_probs[b, node, token] = target_probs[b, node, token]
                child = sib[b][child]
            if child == -1:
                break
            predicts[last] = cand[b][child]
            accepted += 1
            node, last, coin = child, ri[b][child], coins[b][child]
            accept_index[b, accepted] = last
        counts.append(accepted)
        residual = probs[b, node]
        if accepted != num_spec_step - 1:
            residual = (residual - draft_probs[b, node].float()).clamp_min(0)
            if not bool((residual > 0).any()):  # rounding left no residual mass: p itself is the exact answer
                residual = probs[b, node]
        predicts[last] = _inverse_cdf(residual, final_coins[b])
    accept_token_num.copy_(torch.tensor(counts, dtype=torch.int32))


def tree_speculative_sampling_target_only(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> None:
    """Keyword-compatible stand-in for sgl_kernel.tree_speculative_sampling_target_only (eagle_utils.eagle_sample)."""
    tree_speculative_sampling_target_only_cpu(
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        retrive_index,
        retrive_next_token,
        retrive_next_sibling,
        uniform_samples,
        uniform_samples_for_final_sampling,
        target_probs,
        draft_probs,
        threshold_single,
        threshold_acc,
        deterministic,
    )
