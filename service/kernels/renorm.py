"""Top-k / top-p filtering with renormalisation, the CPU stand-ins for FlashInfer's top_{k,p}_renorm_probs.

SGLang resolves these to None on CPU (kernels/ops/sampling/renorm.py); its sampled verify path needs them. The cut
follows SGLang's own torch sampler (layers/sampler.py, top_k_top_p_min_p_sampling_from_probs_torch), so speculative and
plain sampling keep the same support: sort descending, keep rank < k, keep tokens whose exclusive prefix mass <= top_p.
"""

import torch


def _per_row(value: torch.Tensor | float | int, rows: int, dtype: torch.dtype, device) -> torch.Tensor:
    tensor = torch.as_tensor(value, dtype=dtype, device=device).reshape(-1)
    if tensor.numel() == 1:
        return tensor.expand(rows)
    if tensor.numel() != rows:
        raise ValueError(f"expected one value or {rows} values per row, got {tensor.numel()}")
    return tensor


def _renormalise(probs: torch.Tensor, keep_sorted: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    # probs: [rows, vocab]; keep_sorted, order: [rows, vocab] in descending-probability order
    keep = torch.zeros_like(keep_sorted).scatter_(1, order, keep_sorted)
    kept = torch.where(keep, probs, 0.0)
    return kept / kept.sum(-1, keepdim=True).clamp_min(torch.finfo(kept.dtype).tiny)


def top_k_renorm_prob(probs: torch.Tensor, top_k: torch.Tensor | int) -> torch.Tensor:
    """Zero all but the k most probable tokens of each row and renormalise."""
    # probs: [rows, vocab], top_k: [rows] or scalar
    probs = probs.float()
    rows, vocab = probs.shape
    ks = _per_row(top_k, rows, torch.int64, probs.device).clamp(1, vocab)
    order = probs.argsort(dim=-1, descending=True, stable=True)
    keep_sorted = torch.arange(vocab, device=probs.device)[None, :] < ks[:, None]
    return _renormalise(probs, keep_sorted, order)


def top_p_renorm_prob(probs: torch.Tensor, top_p: torch.Tensor | float) -> torch.Tensor:
    """Keep the most probable tokens until their mass reaches top_p (nucleus), renormalise."""
    # probs: [rows, vocab], top_p: [rows] or scalar
    probs = probs.float()
    rows, _ = probs.shape
    ps = _per_row(top_p, rows, torch.float32, probs.device)
    order = probs.argsort(dim=-1, descending=True, stable=True)
    sorted_probs = torch.gather(probs, 1, order)
    exclusive_mass = torch.cumsum(sorted_probs, -1) - sorted_probs
    return _renormalise(probs, exclusive_mass <= ps[:, None], order)
