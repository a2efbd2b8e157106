"""Request hints (the gateway's wire shape) and the per-engine policy set: one policy per name, K capped per request,
a lossy expert budget only when every request of the batch allows it."""

import pytest

from moe_sglang.hints import RequestHints, parse_hints
from moe_sglang.policies import PolicySet
from moe_sglang.settings import EngineSettings
from service.policy import RequestView, ShadowOutcome

SHAPE = {"num_experts": 8, "top_k": 2, "num_layers": 2}
GATEWAY = {
    "tenant": "acme",
    "slo_class": "interactive",
    "ttft_ms": 300.0,
    "tpot_ms": 50.0,
    "policy": "moe_serve",
    "allow_lossy_budget": False,
    "priority": 10,
}


def test_gateway_hints_parse():
    h = parse_hints({"moe_serve": GATEWAY})
    assert (h.tenant, h.policy, h.allow_lossy_budget, h.max_k) == ("acme", "moe-serve", False, None)
    assert h.slo.name == "interactive" and h.slo.ttft_s == pytest.approx(0.3) and h.slo.tpot_s == pytest.approx(0.05)


@pytest.mark.parametrize("params", [None, {}, {"other": 1}])
def test_no_hints_keep_sglang_behaviour(params):
    assert parse_hints(params) == RequestHints(policy="sglang")
    assert parse_hints(params, "static") == RequestHints(policy="static")
    assert parse_hints({"moe_serve": {}}).policy == "moe-serve"


def test_no_policy_means_full_depth():
    plan = PolicySet(SHAPE).plan(
        0.0, views(2), [RequestHints(policy="sglang"), RequestHints(policy="static", max_k=1)], 5
    )
    assert plan.ks == (5, 1) and plan.policies == ("sglang", "static")


@pytest.mark.parametrize(
    "raw", [{"moe_serve": "x"}, {"moe_serve": {"max_k": -1}}, {"moe_serve": {"expert_budget": 1.5}}]
)
def test_bad_hints(raw):
    with pytest.raises(ValueError):
        parse_hints(raw)


def views(n):
    return [RequestView(f"r{i}") for i in range(n)]


def test_policies_built_once_per_name_and_k_capped():
    ps = PolicySet(SHAPE)
    hints = [
        RequestHints(policy="static", max_k=0),
        RequestHints(policy="static"),
        RequestHints(policy="static", max_k=1),
    ]
    for _ in range(3):
        plan = ps.plan(0.0, views(3), hints, max_k=3)
        assert plan.ks == (0, 3, 1) and plan.policies == ("static",) * 3
    assert ps.builds == 1


def test_unknown_policy_falls_back_to_default():
    ps = PolicySet(SHAPE)
    plan = ps.plan(0.0, views(1), [RequestHints(policy="nope")], max_k=3)
    assert plan.policies == ("moe-serve",)


def test_settings_round_trip_through_the_environment_and_reach_the_policy():
    settings = EngineSettings(
        default_policy="cascade",
        policy_params_json='{"static": {"k": 1}}',
        verify_layout="fixed",
        cpu_attention="loop",
        cpu_gemm="linear",
        draft_forward="sglang",
        draft_thread="off",
        target_forward="sglang",
        process_start="spawn",
        gemm_plan="tune",
        arrival_gather_ms=0.0,
        plain_burst=1,
        step_log="/tmp/steps.jsonl",
    )
    assert EngineSettings.from_env(settings.to_env()) == settings
    assert EngineSettings.from_env({}) == EngineSettings()
    plan = PolicySet(SHAPE, settings.policy_params).plan(0.0, views(1), [RequestHints(policy="static")], max_k=3)
    assert plan.ks == (1,)


@pytest.mark.parametrize(
    "bad",
    [
        dict(policy_params_json="[1]"),
        dict(policy_params_json="{not json"),
        dict(budget_mode="drop-all"),
        dict(verify_layout="diagonal"),
        dict(cpu_attention="sideways"),
        dict(cpu_gemm="fastest"),
        dict(draft_forward="compiled"),
        dict(draft_thread="always"),
        dict(target_forward="compiled"),
        dict(process_start="forkserver"),
        dict(gemm_plan="never"),
        dict(arrival_gather_ms=-1.0),
        dict(arrival_gather_ms=5000.0),
        dict(plain_burst=0),
        dict(plain_burst=17),
        dict(default_policy=" "),
    ],
)
def test_bad_settings_fail_at_launch(bad):
    with pytest.raises(ValueError):
        EngineSettings(**bad)


@pytest.mark.parametrize(
    ("hints", "budget"),
    [
        ([RequestHints(policy="static", allow_lossy_budget=True, expert_budget=3)], (3, 3)),
        ([RequestHints(policy="static", expert_budget=3)], None),  # no permission
        (
            [
                RequestHints(policy="static", allow_lossy_budget=True, expert_budget=3),
                RequestHints(policy="static", allow_lossy_budget=False),
            ],
            None,  # one request of the batch does not allow it
        ),
        (
            [
                RequestHints(policy="static", allow_lossy_budget=True, expert_budget=5),
                RequestHints(policy="static", allow_lossy_budget=True, expert_budget=4),
            ],
            (4, 4),  # the tightest wins
        ),
        ([RequestHints(policy="static", allow_lossy_budget=True)], None),  # nobody asked for one
    ],
)
def test_step_budget(hints, budget):
    assert PolicySet(SHAPE).plan(0.0, views(len(hints)), hints, max_k=3).expert_budget == budget


class _Req:
    def __init__(self, rid, custom_params):
        self.rid, self.output_ids, self.origin_input_ids = rid, [1], [1, 2]
        self.sampling_params = type("SP", (), {"custom_params": custom_params})()


def test_runtime_survives_bad_hints_and_failing_policies(monkeypatch):
    from moe_sglang.step import SpecRuntime

    runtime = SpecRuntime(EngineSettings(), SHAPE)
    reqs = [_Req("a", {"moe_serve": {"max_k": -1}}), _Req("b", {"moe_serve": {"policy": "static"}})]
    step = runtime.open(reqs, max_k=3)
    assert runtime.plan(step).ks == (3, 3) and step.plan.policies == ("sglang", "static")

    def broken(*args, **kwargs):
        raise RuntimeError("policy bug")

    monkeypatch.setattr(runtime.policies, "plan", broken)
    assert runtime.plan(runtime.open(reqs, max_k=3)).ks == (3, 3)


def test_hint_caps_are_known_before_drafting():
    from moe_sglang.step import SpecRuntime

    runtime = SpecRuntime(EngineSettings(), SHAPE)
    reqs = [_Req("a", {"moe_serve": {"max_k": 0}}), _Req("b", {"moe_serve": {"max_k": 2}}), _Req("c", None)]
    assert runtime.open(reqs, max_k=3).ceilings() == [0, 2, 3]


class _Resting:
    """A policy that rests its first request until it has emitted 5 tokens."""

    def decide(self, batch):
        from service.policy.base import plan

        return plan(batch, [0] + [1] * (len(batch.requests) - 1), rest_until=(5,) + (0,) * (len(batch.requests) - 1))

    def observe(self, stats):
        pass


def test_a_rest_is_passed_on_only_where_k_stays_0(monkeypatch):
    ps = PolicySet(SHAPE)
    monkeypatch.setattr(ps, "get", lambda name: _Resting())
    plan = ps.plan(0.0, views(2), [RequestHints(policy="moe-serve")] * 2, max_k=3)
    assert plan.ks == (0, 1) and plan.rest_until == (5, 0)


def test_a_policys_draft_stop_reaches_its_own_rows_only():
    """StepPlan.draft_stop: each request gets the Decision.draft_stop of the policy that decided it (moe-serve's default,
    1.1, on its rows after its first step, a plain warm-up; static and rows no policy decides: none), and a StepPlan
    without any is ()."""
    from service.policy.moe_serve import MoeServePolicy

    hints = [RequestHints(policy="moe-serve"), RequestHints(policy="static"), RequestHints(policy="sglang")]
    assert PolicySet(SHAPE).plan(0.0, views(3), hints, max_k=3).draft_stop == ()  # moe-serve's warm-up step
    plan = PolicySet(SHAPE, {"moe-serve": {"warm_up": False}}).plan(0.0, views(3), hints, max_k=3)
    assert plan.draft_stop == (MoeServePolicy().draft_stop, 0.0, 0.0) and plan.draft_stop[0] == 1.1
    assert PolicySet(SHAPE).plan(0.0, views(2), hints[1:], max_k=3).draft_stop == ()
    off = PolicySet(SHAPE, {"moe-serve": {"warm_up": False, "draft_stop": 0.0}})
    assert off.plan(0.0, views(1), hints[:1], max_k=3).draft_stop == ()


def test_a_policys_accept_stop_reaches_its_own_rows_only():
    """StepPlan.accept_stop, as draft_stop: moe-serve's default (0.6) on its rows, none on static's (an operator's
    through its parameters) and on rows no policy decides; () where nobody asks."""
    hints = [RequestHints(policy="moe-serve"), RequestHints(policy="static"), RequestHints(policy="sglang")]
    plan = PolicySet(SHAPE, {"moe-serve": {"warm_up": False}}).plan(0.0, views(3), hints, max_k=3)
    assert plan.accept_stop == (0.6, 0.0, 0.0)
    asked = PolicySet(SHAPE, {"moe-serve": {"warm_up": False, "accept_stop": 0.0}, "static": {"accept_stop": 0.7}})
    assert asked.plan(0.0, views(3), hints, max_k=3).accept_stop == (0.0, 0.7, 0.0)
    assert asked.plan(0.0, views(1), hints[:1], max_k=3).accept_stop == ()


def test_gated_chains_reach_the_policies_view():
    """PolicySet.plan(gated=True) (the STANDALONE worker's drafter.gated) reaches the policy's BatchView.gated (what
    moe-serve does with it: tests/policy/test_moe_serve_gated.py)."""
    from service.policy.moe_serve import MoeServePolicy

    seen = []

    class Spy(MoeServePolicy):
        def decide(self, batch):
            seen.append(batch.gated)
            return super().decide(batch)

    policies = PolicySet(SHAPE)
    policies._policies["moe-serve"] = Spy(warm_up=False)
    hints = [RequestHints(policy="moe-serve")]
    policies.plan(0.0, views(1), hints, max_k=3, judging=True)
    policies.plan(0.0, views(1), hints, max_k=3, judging=True, gated=True)
    assert seen == [False, True]


@pytest.mark.parametrize("stop", [-0.1, 1.0, 1.1])
def test_an_accept_stop_outside_0_1_is_refused(stop):
    """accept_stop is a probability floor: 1 or more would stop every draft (a ratio, misread), below 0 nothing."""
    from service.policy import Decision
    from service.policy.moe_serve import MoeServePolicy
    from service.policy.static import StaticPolicy

    for make in (lambda: Decision(requests=(), accept_stop=stop), lambda: MoeServePolicy(accept_stop=stop)):
        with pytest.raises(ValueError, match="accept_stop"):
            make()
    with pytest.raises(ValueError, match="accept_stop"):
        StaticPolicy(accept_stop=stop)


@pytest.mark.parametrize("stop", [-1.0, 0.5, 0.99])
def test_a_draft_stop_below_1_is_refused(stop):
    """A ratio below 1 could stop nothing (a draft is the draft model's top token, at least its runner-up): a
    misreading (a probability, say) is refused; 0 is off."""
    from service.policy import Decision
    from service.policy.moe_serve import MoeServePolicy

    with pytest.raises(ValueError, match="draft_stop"):
        Decision(requests=(), draft_stop=stop)
    with pytest.raises(ValueError, match="draft_stop"):
        MoeServePolicy(draft_stop=stop)


def test_a_resting_request_steps_as_if_capped_at_k0_until_its_rest_ends(monkeypatch):
    """StepPlan.rest_until: a resting request's hints cap K at 0 (no policy view of a request that may draft; NGRAM
    still judges its draft, test_plain_burst.py) until it has emitted that many tokens; a batch of resting requests
    asks no policy."""
    from moe_sglang.step import SpecRuntime

    runtime = SpecRuntime(EngineSettings(), SHAPE)
    monkeypatch.setattr(runtime.policies, "get", lambda name: _Resting())
    reqs = [_Req("a", {"moe_serve": {}}), _Req("b", {"moe_serve": {}})]
    step = runtime.open(reqs, max_k=3)
    assert step.ceilings() == [3, 3] and runtime.plan(step).rest_until == (5, 0)
    step = runtime.open(reqs, max_k=3)
    assert step.ceilings() == [0, 3] and runtime.plan(step).ks == (0, 1) and step.resting == (True, False)
    lone = runtime.open(reqs[:1], max_k=3)
    assert lone.views == () and runtime.plan(lone).ks == (0,)  # nobody may draft: no policy asked
    reqs[0].output_ids = [1] * 5
    assert runtime.open(reqs, max_k=3).ceilings() == [3, 3] and "a" not in runtime.resting


def test_the_step_log_has_a_line_per_closed_step(tmp_path):
    """EngineSettings.step_log: every closed step appends its timing and decisions (moe_sglang/step_log.py)."""
    from moe_sglang.step import SpecRuntime
    from moe_sglang.step_log import read

    path = tmp_path / "steps.jsonl"
    runtime = SpecRuntime(EngineSettings(step_log=str(path)), SHAPE)
    reqs = [_Req("a", {"moe_serve": {"policy": "static", "max_k": 2}}), _Req("b", {"moe_serve": {"max_k": 0}})]
    for accepted in (1, 2):
        step = runtime.open(reqs, max_k=3)
        runtime.plan(step, [3, 2] if accepted == 2 else None)  # NGRAM plans with the depths its lookup found
        runtime.close(step, [2, 0], [accepted, 0], (ShadowOutcome("b", 2, 2, accepted - 1),))
    lines = read(path)
    assert [(x["rids"], x["k"], x["verified"], x["accepted"]) for x in lines] == [
        (["a", "b"], [2, 0], [2, 0], [a, 0]) for a in (1, 2)
    ]
    assert [(x["depth"], x["shadow"]) for x in lines] == [([], [[2, 0]]), ([3, 2], [[2, 1]])]
    assert all(x["start"] <= x["end"] and not x["plain"] and x["resting"] == 0 for x in lines)
    assert SpecRuntime(EngineSettings(), SHAPE).step_log is None  # off by default


def test_the_policies_see_the_engines_plain_burst(monkeypatch):
    """BatchView.plain_burst: the forwards of a plain burst (settings.plain_burst, at most a row of K + 1 tokens),
    which moe-serve sizes its rests by."""
    from moe_sglang.step import SpecRuntime

    seen = []

    class Recording(_Resting):
        def decide(self, batch):
            seen.append(batch.plain_burst)
            return super().decide(batch)

    for burst, max_k, expected in ((4, 3, 4), (4, 2, 3), (1, 3, 1)):
        runtime = SpecRuntime(EngineSettings(plain_burst=burst), SHAPE)
        monkeypatch.setattr(runtime.policies, "get", lambda name: Recording())
        runtime.plan(runtime.open([_Req("a", {"moe_serve": {}})], max_k=max_k))
        assert seen[-1] == expected


def test_the_policies_see_where_judgements_run(monkeypatch):
    """BatchView.judge_beside: the STANDALONE worker judges beside the target's forward (its draft thread), which
    moe-serve times its first judgements by; an engine that cannot judge never says so."""
    from moe_sglang.step import SpecRuntime

    seen = []

    class Recording(_Resting):
        def decide(self, batch):
            seen.append((batch.judging, batch.judge_beside))
            return super().decide(batch)

    for judging, beside in ((True, True), (True, False), (False, True), (False, False)):
        runtime = SpecRuntime(EngineSettings(), SHAPE)
        monkeypatch.setattr(runtime.policies, "get", lambda name: Recording())
        runtime.plan(runtime.open([_Req("a", {"moe_serve": {}})], max_k=3), judging=judging, beside=beside)
    assert seen == [(True, True), (True, False), (False, False), (False, False)]
