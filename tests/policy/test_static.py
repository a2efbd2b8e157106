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


def test_static_draft_stop_is_off_unless_asked():
    """Static K stays SGLang's static K by default; an operator's draft_stop reaches every decision; below 1 (where
    no draft could be stopped) it is refused."""
    assert StaticPolicy(k=3).decide(batch(2, max_k=4)).draft_stop == 0.0
    assert StaticPolicy(k=3, draft_stop=1.2).decide(batch(2, max_k=4)).draft_stop == 1.2
    with pytest.raises(ValueError, match="draft_stop"):
        StaticPolicy(k=3, draft_stop=0.5)
    assert StaticPolicy(k=3).decide(batch(2, max_k=4)).accept_stop == 0.0
    assert StaticPolicy(k=3, accept_stop=0.6).decide(batch(2, max_k=4)).accept_stop == 0.6
