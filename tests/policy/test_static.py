import pytest

from service.policy.static import StaticPolicy
from tests.policy.helpers import batch


@pytest.mark.parametrize(("k", "max_k", "expected"), [(0, 7, 0), (3, 7, 3), (5, 2, 2), (3, 0, 0)])
def test_static_k_clamped_to_engine_max(k, max_k, expected):
    d = StaticPolicy(k).decide(batch(3, max_k=max_k))
    assert [(r.k, r.verify_len) for r in d.requests] == [(expected, expected)] * 3


def test_static_rejects_negative_k():
    with pytest.raises(ValueError):
        StaticPolicy(-1)
