import math

import pytest
import torch

from service.models.balance import per_layer_balance_loss


def test_uniform_routing_scores_one():
    logits = torch.zeros(64, 8)
    logits[torch.arange(64), torch.arange(64) % 8] = 1.0  # each expert first choice equally often
    logits[torch.arange(64), (torch.arange(64) + 1) % 8] = 0.5
    assert per_layer_balance_loss((logits, logits), top_k=2).item() == pytest.approx(1.0, abs=0.05)


def test_collapsed_routing_is_penalised():
    logits = torch.zeros(64, 8)
    logits[:, :2] = 10.0  # every token to experts 0 and 1
    assert per_layer_balance_loss((logits,), top_k=2).item() == pytest.approx(4.0, rel=0.01)


def test_opposite_imbalance_in_two_layers_is_not_cancelled():
    """Pooling both layers would look balanced; the per-layer term must not."""
    a = torch.zeros(64, 4)
    a[:, :2] = 5.0
    b = torch.zeros(64, 4)
    b[:, 2:] = 5.0
    per_layer = per_layer_balance_loss((a, b), top_k=2).item()
    pooled = per_layer_balance_loss((torch.cat([a, b]),), top_k=2).item()
    assert per_layer > 1.9
    assert pooled < 1.1


def test_gradient_reaches_router_logits():
    logits = torch.randn(16, 4, requires_grad=True)
    per_layer_balance_loss((logits,), top_k=1).backward()
    assert logits.grad is not None and math.isfinite(logits.grad.abs().sum().item())


def test_no_layers_is_an_error():
    with pytest.raises(ValueError):
        per_layer_balance_loss((), top_k=2)
