import pytest
import torch

from service.kernels.shared_expert_gate import gate_sigmoid_mul, gate_sigmoid_mul_add


def reference(h, w, s):
    # one token at a time, as the model card describes the gate: a scalar sigmoid gate per token
    return torch.stack([torch.sigmoid((h[t] * w).sum()) * s[t] for t in range(h.shape[0])])


@pytest.mark.parametrize(("tokens", "hidden", "seed"), [(1, 8, 0), (5, 64, 1), (17, 96, 2)])
def test_gate_matches_per_token_reference(tokens, hidden, seed):
    g = torch.Generator().manual_seed(seed)
    h, s, f = (torch.randn(tokens, hidden, generator=g) for _ in range(3))
    w = torch.randn(hidden, generator=g)
    torch.testing.assert_close(gate_sigmoid_mul(h, w, s), reference(h, w, s))
    out = f.clone()
    gate_sigmoid_mul_add(h, w, s, out)
    torch.testing.assert_close(out, f + reference(h, w, s))


def test_gate_keeps_dtype():
    h = torch.randn(3, 16, dtype=torch.bfloat16)
    assert gate_sigmoid_mul(h, torch.randn(16, dtype=torch.bfloat16), h).dtype == torch.bfloat16
