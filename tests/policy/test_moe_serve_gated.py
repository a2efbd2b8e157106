"""moe-serve where the drafter's chains are gated by an acceptance head (BatchView.gated): no first-judgement wait."""

from dataclasses import replace

from tests.policy.test_moe_serve import cpu_like, judged_batch


def test_a_gated_request_speculates_before_its_first_judgement():
    """judged_first waits for a request's own judgement because an ungated first draft is verified whatever it is;
    a gated chain's doubtful drafts are cut before the verify, so on a gating engine a new request speculates on the
    acceptance earlier requests left, at once; a policy that asks no head (accept_stop 0) still waits."""
    assert [r.k for r in cpu_like(0.9).decide(judged_batch(1)).requests] == [0, 0]
    gated = replace(judged_batch(1), gated=True)
    assert all(r.k > 0 for r in cpu_like(0.9).decide(gated).requests)
    policy = cpu_like(0.9)
    policy.accept_stop = 0.0
    assert [r.k for r in policy.decide(gated).requests] == [0, 0]
    assert [r.k for r in cpu_like(0.1).decide(gated).requests] == [0, 0]  # the prior decides: drafts that never pay
