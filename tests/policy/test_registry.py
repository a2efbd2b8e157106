import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.policy import available_policies, make_policy
from tests.policy.helpers import batch, stats

POLICIES = ["static", "sglang-adaptive", "cascade", "adaspec", "moe-serve"]


def test_registry_lists_every_policy():
    assert set(available_policies()) == set(POLICIES)


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown speculation policy 'nope'.*static"):
        make_policy("nope")


def test_bad_parameter_is_a_clear_error():
    with pytest.raises(ValueError, match="bad parameters for policy 'static'"):
        make_policy("static", kk=3)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=15, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=12),
    max_k=st.integers(0, 7),
    accept_frac=st.floats(0, 1),
    step_s=st.floats(1e-3, 5e-2),
    conf=st.floats(0.01, 0.99),
)
def test_every_policy_keeps_k_and_verify_len_in_bounds(name, sizes, max_k, accept_frac, step_s, conf):
    policy = make_policy(name)
    for n in sizes:
        b = batch(n, max_k=max_k)
        d = policy.decide(b)
        assert [r.request_id for r in d.requests] == [r.request_id for r in b.requests]
        assert all(0 <= r.k <= max_k and 0 <= r.verify_len <= r.k for r in d.requests)
        d = policy.trim(batch(n, max_k=max_k, confidences=(conf,) * max_k), d)
        assert all(0 <= r.verify_len <= r.k <= max_k for r in d.requests)
        ks = [r.verify_len for r in d.requests]
        policy.observe(stats(ks, [int(k * accept_frac) for k in ks], step_s * (1 + 0.1 * sum(ks))))
