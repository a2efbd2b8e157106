"""Policies inside the CPU SGLang engine, one NGRAM engine with metrics for the whole module: per-request K (K = 0
next to K = 3 in one batch), the ragged verify's token count, plain decode steps when nobody speculates, policies
switched per request, the expert budget in verify, and the moe_serve:* metrics on /metrics."""

import concurrent.futures
from dataclasses import replace

import httpx
import pytest

from moe_sglang import metrics as names
from moe_sglang.stats_output import META_KEY
from tests.engine import engine_config, generate
from tests.moe_sglang.prompts import REPETITIVE
from tests.moe_sglang.test_greedy_vs_transformers import transformers_greedy

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

NEW_TOKENS = 40
PROMPT = REPETITIVE[0]


@pytest.fixture(scope="module")
def engine(tiny_models, engine_pool):
    config = engine_config(tiny_models["mixtral"], metrics=True, algorithm="ngram", topk=1, num_draft_tokens=4)
    # moe-serve never speculates here (k_max = 0) but its requests are looked up: their drafts are judged unverified
    config = replace(config, settings=replace(config.settings, policy_params_json='{"moe-serve": {"k_max": 0}}'))
    return engine_pool.url(config)


@pytest.fixture(scope="module")
def reference(tiny_models):
    """Non-speculative greedy output (SGLang's plain decode equals transformers: test_greedy_vs_transformers)."""
    return transformers_greedy(tiny_models["mixtral"], PROMPT, NEW_TOKENS)


def hinted(url, prompt=PROMPT, **hints):
    return generate(url, prompt, NEW_TOKENS, ignore_eos=True, custom_params={"moe_serve": hints})


def scrape(url) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples, name, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def test_k0_next_to_k3_in_one_batch(engine, reference):
    # NGRAM drafts from its corpus of earlier outputs: one request first, so the batch below has drafts to accept
    assert hinted(engine, policy="static")["output_ids"] == reference
    mixed_before = total(scrape(engine), names.MIXED_STEPS + "_total")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        off = [pool.submit(hinted, engine, policy="static", max_k=0, tenant="off") for _ in range(2)]
        on = [pool.submit(hinted, engine, policy="static", tenant="on") for _ in range(2)]
        off, on = [f.result() for f in off], [f.result() for f in on]
    for out in off:
        assert out["output_ids"] == reference, "a K=0 request must decode exactly like plain decoding"
        assert out["meta_info"]["spec_num_correct_drafts"] == 0
    for out in on:
        assert out["output_ids"] == reference, "speculation with K=3 must stay lossless"
        assert out["meta_info"]["spec_accept_length"] > 1.5, out["meta_info"]
    samples = scrape(engine)
    assert total(samples, names.MIXED_STEPS + "_total") > mixed_before, "K=0 and K=3 never shared a verify batch"
    assert total(samples, names.SPEC_OFF + "_total", tenant="off") >= NEW_TOKENS - 1
    assert total(samples, names.SPEC_OFF + "_total", tenant="on") == 0


def forward_counts(url) -> dict[str, float]:
    samples = scrape(url)
    return {
        "verify_tokens": total(samples, names.VERIFY_TOKENS + "_total"),
        "decode_tokens": total(samples, names.DECODE_TOKENS + "_total"),
        "verify": total(samples, names.TARGET_FORWARDS + "_total", kind="verify"),
        "decode": total(samples, names.TARGET_FORWARDS + "_total", kind="decode"),
        "drafts": total(samples, names.DRAFT_PHASES + "_total"),
        "verified_drafts": total(samples, names.PROPOSED_AT + "_total"),
        "request_steps": total(samples, names.K_CHOSEN + "_count"),
        "mixed": total(samples, names.MIXED_STEPS + "_total"),
    }


def delta(before: dict, after: dict) -> dict:
    return {key: after[key] - before[key] for key in before}


def test_verify_tokens_are_the_sum_of_min_k_and_depth_plus_one(engine, reference):
    """A batch mixing K = 0, 1, 2, 3: the target processes sum_i (min(K_i, D_i) + 1) tokens per step, counted from
    the forwards' inputs, against the drafts the steps verified (min(K_i, D_i), counted per position) + 1 each."""
    assert hinted(engine, policy="static")["output_ids"] == reference  # fills the NGRAM corpus: drafts to verify
    before = forward_counts(engine)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = [f.result() for f in [pool.submit(hinted, engine, policy="static", max_k=k) for k in (0, 1, 2, 3)]]
    got = delta(before, forward_counts(engine))
    for out in outs:
        assert out["output_ids"] == reference
    assert got["mixed"] > 0 and got["verify"] > 0, got
    assert got["verify_tokens"] + got["decode_tokens"] == got["verified_drafts"] + got["request_steps"], got
    full_width = 4 * 4 * got["verify"]  # SGLang's layout: every request verifies the whole 4-token draft
    assert got["verify_tokens"] < full_width, got


def test_a_step_where_nobody_speculates_is_a_plain_decode(engine, reference):
    """K = 0 for every request: no draft lookup, no verify forward, one plain decode forward per step."""
    before = forward_counts(engine)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outs = [f.result() for f in [pool.submit(hinted, engine, policy="static", max_k=0) for _ in range(2)]]
    got = delta(before, forward_counts(engine))
    for out in outs:
        assert out["output_ids"] == reference
        assert out["meta_info"]["spec_num_correct_drafts"] == 0
    assert got["drafts"] == 0 and got["verify"] == 0 and got["verify_tokens"] == 0, got
    assert got["decode"] >= NEW_TOKENS - 1 and got["decode_tokens"] == got["request_steps"], got
    # a batch nobody in may draft decodes up to num_draft_tokens (4) tokens per scheduler step (plain_burst.py), one
    # plain forward each: SGLang's step count per request is well below its tokens
    for out in outs:
        assert out["meta_info"]["spec_verify_ct"] <= (NEW_TOKENS - 1) // 2, out["meta_info"]


@pytest.mark.parametrize("max_k", [1, 3])
def test_a_request_alone_verifies_at_most_k_plus_one_tokens(engine, reference, max_k):
    before = forward_counts(engine)
    assert hinted(engine, policy="static", max_k=max_k)["output_ids"] == reference
    got = delta(before, forward_counts(engine))
    assert got["verify"] > 0 and got["verify_tokens"] <= (max_k + 1) * got["verify"], got


def test_policy_switches_per_request_without_restart(engine, engine_pool, reference):
    starts = engine_pool.starts
    for policy in ("static", "sglang_adaptive", "cascade", "moe-serve", "adaspec"):
        before = total(scrape(engine), names.K_CHOSEN + "_count", policy=policy.replace("_", "-"))
        out = hinted(engine, policy=policy)
        assert out["output_ids"] == reference, f"policy {policy} changed greedy output"
        after = total(scrape(engine), names.K_CHOSEN + "_count", policy=policy.replace("_", "-"))
        # the request's decode steps as its own stats count them (a plain burst's forwards are steps of their own)
        steps = out["meta_info"][META_KEY][0]["num_decode_steps"]
        assert after - before == steps, f"policy {policy} decided {after - before} of this request's {steps} steps"
    assert engine_pool.starts == starts


def test_openai_route_carries_gateway_hints(engine):
    """The gateway's wire shape: a top-level custom_params on /v1/completions reaches the policies."""
    model = httpx.get(f"{engine}/v1/models", timeout=30).json()["data"][0]["id"]
    hints = {"tenant": "acme", "slo_class": "interactive", "ttft_ms": 300.0, "policy": "cascade", "priority": 10}
    before = total(scrape(engine), names.K_CHOSEN + "_count", policy="cascade", tenant="acme")
    body = {"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "custom_params": {"moe_serve": hints}}
    httpx.post(f"{engine}/v1/completions", json=body, timeout=300).raise_for_status()
    assert total(scrape(engine), names.K_CHOSEN + "_count", policy="cascade", tenant="acme") > before


def test_unverified_drafts_are_judged_by_the_tokens_emitted(engine, reference):
    """A request kept at K = 0 whose NGRAM drafts are looked up (moe-serve, k_max = 0 on this engine): the engine
    walks each draft it did not verify along the tokens emitted next (moe_sglang/shadow.py). The corpus already
    holds this very output, so the drafts are (nearly) all right: a walk out of step with the emitted tokens would
    judge them wrong."""
    assert hinted(engine, policy="static")["output_ids"] == reference  # fills the NGRAM corpus
    out = hinted(engine, policy="moe-serve")
    assert out["output_ids"] == reference
    stats = out["meta_info"][META_KEY][0]
    assert stats["num_spec_steps"] == 0 and stats["num_steps_k0"] == NEW_TOKENS - 1, stats
    judged, accepted = stats["num_shadow_drafts"], stats["num_shadow_accepted_drafts"]
    assert judged >= NEW_TOKENS // 2 and accepted >= 0.8 * judged, stats
    off = hinted(engine, policy="static", max_k=0)["meta_info"][META_KEY][0]  # capped by its hint: no lookup at all
    assert off["num_shadow_drafts"] == 0


def test_plain_steps_measure_how_much_consecutive_tokens_reuse_their_experts(engine, reference):
    """A request alone whose policy keeps K = 0 (moe-serve on this prompt: test above) decodes plainly: from its
    second plain step on, each measures the share of its token's experts the token before also routed to (what an
    accepted draft would reuse), summarised per request. A request whose hint forbids drafts is not measured: no
    draft of its will ever be priced by it."""
    out = hinted(engine, policy="moe-serve")
    assert out["output_ids"] == reference
    stats = out["meta_info"][META_KEY][0]
    assert stats["num_steps_k0"] >= 2, stats
    assert stats["expert_reuse"] is not None and 0.0 <= stats["expert_reuse"] <= 1.0, stats
    off = hinted(engine, policy="static", max_k=0)
    assert off["output_ids"] == reference
    assert off["meta_info"][META_KEY][0]["expert_reuse"] is None


def test_step_metrics_exported(engine):
    hinted(engine, policy="static")
    samples = scrape(engine)
    for name in (names.ACCEPTED_AT, names.PROPOSED_AT):
        assert total(samples, name + "_total", policy="static", position="1") > 0, name
    assert total(samples, names.ACCEPT_LENGTH + "_count", policy="static") > 0
    assert total(samples, names.UTILITY + "_count", policy="static") > 0
    for phase in ("draft", "verify", "other"):
        assert total(samples, names.STEP_SECONDS + "_sum", phase=phase) > 0, phase
    assert total(samples, names.UNIQUE_EXPERTS + "_count") > 0


def test_expert_budget_in_verify(engine, reference):
    # B = E (8): no budget in effect, output identical
    full = hinted(engine, policy="static", allow_lossy_budget=True, expert_budget=8)
    assert full["output_ids"] == reference
    # without permission a budget hint is ignored
    assert hinted(engine, policy="static", expert_budget=2)["output_ids"] == reference

    before = scrape(engine)
    budgeted = hinted(engine, policy="static", allow_lossy_budget=True, expert_budget=2)
    after = scrape(engine)
    name = names.UNIQUE_EXPERTS
    layers_seen = total(after, name + "_count") - total(before, name + "_count")
    within = total(after, name + "_bucket", le="2.0") - total(before, name + "_bucket", le="2.0")
    assert layers_seen > 0 and within == layers_seen, "a verify forward touched more than B=2 experts in a layer"
    dropped = total(after, names.BUDGET_DROPPED + "_total") - total(before, names.BUDGET_DROPPED + "_total")
    assert dropped > 0, "B=2 of 8 experts should drop experts the verify tokens wanted"
    got = budgeted["output_ids"]
    agree = next((i for i, (a, b) in enumerate(zip(got, reference, strict=False)) if a != b), len(reference))
    same = sum(a == b for a, b in zip(got, reference, strict=False))
    print(
        f"\nexpert budget B=2/8 (truncation): greedy prefix agreement {agree}/{len(reference)}, "
        f"positions equal {same}/{len(reference)}, accept length {budgeted['meta_info']['spec_accept_length']:.2f}"
    )


def test_standalone_tree_k0_k1_k3_in_one_batch(tiny_models, engine_pool, reference):
    """The same on the EAGLE V2 worker (STANDALONE, self-draft) with a draft tree (topk 2): K=1 cuts it mid-way.
    The draft model catches up lazily: each drafting request's first draft runs it over the whole prompt (counted),
    the K = 0 request never."""
    model = tiny_models["mixtral"]
    spec = dict(algorithm="standalone", draft_model_path=str(model), num_steps=3, topk=2, num_draft_tokens=6)
    url = engine_pool.url(engine_config(model, metrics=True, **spec))
    before = total(scrape(url), names.DRAFT_CATCH_UP_TOKENS + "_total")
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(hinted, url, policy="static", max_k=k) for k in (0, 1, 3)]
        k0, k1, k3 = (f.result() for f in futures)
    for out in (k0, k1, k3):
        assert out["output_ids"] == reference
    assert k0["meta_info"]["spec_num_correct_drafts"] == 0
    assert 0 < k1["meta_info"]["spec_num_correct_drafts"] <= k1["meta_info"]["spec_verify_ct"]
    assert k3["meta_info"]["spec_num_correct_drafts"] > k1["meta_info"]["spec_num_correct_drafts"]
    caught_up = total(scrape(url), names.DRAFT_CATCH_UP_TOKENS + "_total") - before
    prompt = k1["meta_info"]["prompt_tokens"]
    # two drafting requests, each over its prompt once; after that only what a rejected draft leaves behind
    assert 2 * (prompt - 1) <= caught_up <= 2 * (prompt - 1) + 2 * 6 * NEW_TOKENS
