"""Top-k / top-p renormalisation vs a per-row sorted-list reference."""

import pytest
import torch

from service.kernels.renorm import top_k_renorm_prob, top_p_renorm_prob


def _reference(row: list[float], keep) -> list[float]:
    order = sorted(range(len(row)), key=lambda i: -row[i])
    kept, mass = set(), 0.0
    for rank, i in enumerate(order):
        if keep(rank, mass):
            kept.add(i)
        mass += row[i]
    total = sum(row[i] for i in kept)
    return [row[i] / total if i in kept else 0.0 for i in range(len(row))]


@pytest.mark.parametrize(("seed", "rows", "vocab"), [(0, 1, 4), (1, 5, 17), (2, 8, 64)])
def test_top_k_matches_reference(seed, rows, vocab):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(rows, vocab, generator=g) * 2, -1)
    ks = torch.randint(1, vocab + 1, (rows,), generator=g)
    out = top_k_renorm_prob(probs, ks)
    for r in range(rows):
        k = int(ks[r])
        expected = _reference(probs[r].tolist(), lambda rank, _mass, k=k: rank < k)
        assert torch.allclose(out[r], torch.tensor(expected), atol=1e-6)


@pytest.mark.parametrize(("seed", "rows", "vocab"), [(0, 1, 4), (1, 5, 17), (2, 8, 64)])
def test_top_p_matches_reference(seed, rows, vocab):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(rows, vocab, generator=g) * 2, -1)
    ps = torch.rand(rows, generator=g) * 0.9 + 0.05
    out = top_p_renorm_prob(probs, ps)
    for r in range(rows):
        p = float(ps[r])
        expected = _reference(probs[r].tolist(), lambda _rank, mass, p=p: mass <= p + 1e-7)
        assert torch.allclose(out[r], torch.tensor(expected), atol=1e-5)


def test_scalar_parameters_and_bad_lengths():
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    assert torch.allclose(top_k_renorm_prob(probs, 1), torch.tensor([[1.0, 0, 0], [0, 0, 1.0]]))
    assert torch.allclose(top_p_renorm_prob(probs, 1.0), probs)
    with pytest.raises(ValueError, match="per row"):
        top_k_renorm_prob(probs, torch.tensor([1, 2, 3]))
