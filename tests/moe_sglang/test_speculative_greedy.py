"""Greedy output with NGRAM and STANDALONE speculation (chain and tree) == without speculation, and speculation
really ran: accepted drafts are seen on prompts that draft well. meta_info's spec_accept_length is completion tokens
per verify step; with every draft rejected it is 48/47 ≈ 1.02 here (the first token comes from prefill). Then the
same with K = 0, 1, 2, 3 mixed in one batch (per-request K from the static policy's hint)."""

import json
import shutil
from dataclasses import replace

import httpx
import pytest
import torch

from moe_sglang.metrics import MIXED_STEPS
from moe_sglang.stats_output import META_KEY
from moe_sglang.step_log import read as read_steps
from service.models.accept_head import EXTRA, AcceptHead
from tests.engine import engine_config, generate
from tests.moe_sglang.prompts import REPETITIVE, random_prompts

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

LONG, SHORT = 48, 10
ACCEPTING = REPETITIVE
REJECTING = random_prompts(3, 10, vocab=300, seed=7)


@pytest.fixture(scope="module")
def plain_outputs(tiny_models, engine_pool):
    """Reference outputs of the same model without speculation, keyed by (prompt, length)."""
    url = engine_pool.url(engine_config(tiny_models["mixtral-echo"]))
    cases = [(tuple(p), LONG) for p in ACCEPTING] + [(tuple(p), SHORT) for p in REJECTING]
    return {case: generate(url, list(case[0]), case[1], ignore_eos=True)["output_ids"] for case in cases}


SPEC_CASES = {
    "ngram-chain": dict(algorithm="ngram", topk=1, num_draft_tokens=4),
    "ngram-tree": dict(algorithm="ngram", topk=4, num_draft_tokens=8),
    "standalone-chain": dict(algorithm="standalone", num_steps=3, topk=1, num_draft_tokens=4),
    "standalone-tree": dict(algorithm="standalone", num_steps=3, topk=2, num_draft_tokens=6),
    "standalone-poor-draft": dict(algorithm="standalone", num_steps=3, topk=1, num_draft_tokens=4),
    "standalone-dense-chain": dict(algorithm="standalone", num_steps=3, topk=1, num_draft_tokens=4),
    "standalone-dense-tree": dict(algorithm="standalone", num_steps=3, topk=2, num_draft_tokens=6),
}
DRAFTS = {
    "standalone-poor-draft": "mixtral-other",
    "standalone-dense-chain": "llama-echo",
    "standalone-dense-tree": "llama-echo",
}


def spec_config(case, tiny_models):
    spec = dict(SPEC_CASES[case])
    if spec["algorithm"] == "standalone":
        spec["draft_model_path"] = str(tiny_models[DRAFTS.get(case, "mixtral-echo")])
    config = engine_config(tiny_models["mixtral-echo"], metrics=True, **spec)
    if DRAFTS.get(case) == "llama-echo":  # the direct draft forward's work beside the target's on its own thread,
        # whatever the host's spare cores (draft_thread.py): each prompt caught up beside its prefill
        config = replace(config, settings=replace(config.settings, draft_thread="on"))
    return config


def spec_engine(case, tiny_models, engine_pool) -> str:
    return engine_pool.url(spec_config(case, tiny_models))


@pytest.mark.parametrize("case", list(SPEC_CASES), scope="module")
def test_speculative_greedy_equals_plain(case, plain_outputs, tiny_models, engine_pool):
    url = spec_engine(case, tiny_models, engine_pool)
    accept_lengths = []
    for (prompt, length), expected in plain_outputs.items():
        out = generate(url, list(prompt), length, ignore_eos=True)
        assert out["output_ids"] == expected, f"{case}: prompt {prompt[:6]}... diverged from plain decoding"
        assert out["meta_info"]["spec_verify_ct"] > 0, f"{case}: no verify step ran"
        if length == LONG:
            accept_lengths.append(out["meta_info"]["spec_accept_length"])
    log = engine_pool.logs[spec_config(case, tiny_models)].read_text()
    # the Mixtral target's plain decodes and ragged verifies ran directly (target_forward.py), none fell back, their
    # MoE sublayers inline (inline_moe.py)
    assert "target model: direct decode forward" in log and "target model: SGLang's forward" not in log
    assert "attention decode_attention op" in log  # plain decodes' attention: one C++ call per layer
    assert "MoE sublayers ran by the decode_moe op" in log  # and their MoE sublayers
    assert "MoE through SGLang's modules" not in log
    if SPEC_CASES[case]["algorithm"] == "standalone":  # which forward the draft ran, and why not the direct one
        expected = (
            "direct forward"
            if DRAFTS.get(case) == "llama-echo"
            else "SGLang's runner (MoeServeMixtralForCausalLM is not"
        )
        assert f"draft model: {expected}" in log
        assert ("on a thread beside the target's forwards" in log) == (DRAFTS.get(case) == "llama-echo")
    if case == "standalone-poor-draft":
        assert min(accept_lengths) < 1.2, f"a draft with other weights should be rejected mostly: {accept_lengths}"
    elif DRAFTS.get(case) == "llama-echo":  # another architecture's echo: some drafts accepted, not many
        assert max(accept_lengths) > 1.0, f"{case}: no draft was accepted: {accept_lengths}"
    else:
        assert max(accept_lengths) > 1.2, f"{case}: drafts were hardly accepted: {accept_lengths}"


@pytest.mark.parametrize("case", ["standalone-dense-chain", "standalone-dense-tree"], scope="module")
def test_dense_draft_runs_directly_and_drafts_as_sglangs_runner(case, plain_outputs, tiny_models, engine_pool):
    """The dense draft's forwards run without SGLang's runner (moe_sglang/draft_forward.py; the engine log says so),
    and its drafts are the runner's: at static K = 3 every request verifies and accepts exactly as on an engine whose
    draft runs through SGLang's runner (`draft_forward=sglang`)."""
    direct_config = spec_config(case, tiny_models)
    url = engine_pool.url(direct_config)
    assert "draft model: direct forward" in engine_pool.logs[direct_config].read_text()
    runner_config = replace(direct_config, settings=replace(direct_config.settings, draft_forward="sglang"))
    custom = {"moe_serve": {"policy": "static", "max_k": 3}}

    def run(engine_url):
        return [
            generate(engine_url, list(prompt), length, ignore_eos=True, custom_params=custom)
            for prompt, length in plain_outputs
        ]

    direct = run(url)
    runner = run(engine_pool.url(runner_config))
    assert "draft model: direct forward" not in engine_pool.logs[runner_config].read_text()
    for a, b in zip(direct, runner, strict=True):
        assert a["output_ids"] == b["output_ids"]
        for key in ("spec_verify_ct", "spec_accept_length"):
            assert a["meta_info"][key] == b["meta_info"][key], (key, a["meta_info"][key], b["meta_info"][key])
    assert sum(out["meta_info"]["spec_num_correct_drafts"] > 0 for out in direct) > 0, "no draft was ever accepted"


def mixed_steps(url) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(MIXED_STEPS + "_total"))


@pytest.mark.parametrize("case", [c for c in SPEC_CASES if c != "standalone-poor-draft"], scope="module")
def test_mixed_k_batch_equals_plain(case, plain_outputs, tiny_models, engine_pool):
    """Four requests with K = 0, 1, 2, 3 decoding together: each one's output equals plain decoding. Sent as one
    batched /generate request, so the four reach the scheduler together and share steps whatever the engine's speed
    (four concurrent HTTP requests could arrive far enough apart that the fastest finished before the last started:
    "never shared a step" once in a few runs on a 2-core host)."""
    url = spec_engine(case, tiny_models, engine_pool)
    prompts = [*ACCEPTING, ACCEPTING[0]]
    before = mixed_steps(url)
    params = [
        {
            "max_new_tokens": LONG,
            "temperature": 0.0,
            "ignore_eos": True,
            "custom_params": {"moe_serve": {"policy": "static", "max_k": k}},
        }
        for k in (0, 1, 2, 3)
    ]
    response = httpx.post(f"{url}/generate", json={"input_ids": prompts, "sampling_params": params}, timeout=300)
    response.raise_for_status()
    outs = [out["output_ids"] for out in response.json()]
    for prompt, out in zip(prompts, outs, strict=True):
        assert out == plain_outputs[(tuple(prompt), LONG)], f"{case}: prompt {prompt[:6]}... diverged"
    assert mixed_steps(url) > before, f"{case}: K = 0 and K > 0 never shared a step"


@pytest.mark.parametrize(
    ("draft", "accepting"), [("mixtral-echo", True), ("mixtral-other", False), ("llama-echo", None)]
)
def test_standalone_judges_its_draft_model_without_a_verify(
    draft, accepting, plain_outputs, tiny_models, engine_pool, tmp_path
):
    """moe-serve on STANDALONE, its acceptance prior at 0 (no speculation before a measurement): instead of a probe
    (a verify of 3 drafts), each request has its draft model judged without a verify once it has emitted a few
    tokens (draft_judge.py). The self-draft predicts the target's own tokens, so every judged position is
    accepted (a prediction compared one position out of step would not be); a draft with other weights is rejected.
    Output is plain decoding's either way. The judgement gate is off: on the tiny models a STANDALONE step is fixed
    cost and speculation cannot repay a judgement (judgements_pay), which would leave nothing judged to check.
    A judgement's forward is timed apart from drafting (StepStats.judge_s; the step log shows both): a policy that
    fits draft steps on it prices every draft step as a forward over a context. The dense draft (llama-echo, another
    architecture's echo: its acceptance is not asserted) runs its judgements on the draft thread (draft_thread.py),
    each prompt caught up beside its prefill: the step waits only for what the forward had left when the target's
    was done, and the log has the forward's own time apart."""
    spec = dict(SPEC_CASES["standalone-chain"], draft_model_path=str(tiny_models[draft]))
    config = engine_config(tiny_models["mixtral-echo"], **spec)
    params = '{"moe-serve": {"acceptance_prior": 0.0, "judge_gate": false}}'
    steps = tmp_path / "steps.jsonl"
    beside = "on" if draft == "llama-echo" else "auto"
    settings = replace(config.settings, policy_params_json=params, step_log=str(steps), draft_thread=beside)
    url = engine_pool.url(replace(config, settings=settings))
    judged = accepted = 0
    first = 2 if draft == "llama-echo" else 4  # tokens emitted before the first judgement (below)
    rids = []
    for prompt in ACCEPTING:
        custom = {"moe_serve": {"policy": "moe-serve"}}
        out = generate(url, prompt, LONG, ignore_eos=True, custom_params=custom)
        assert out["output_ids"] == plain_outputs[(tuple(prompt), LONG)]
        rids.append(out["meta_info"]["id"])
        stats = out["meta_info"][META_KEY][0]
        # judge_after tokens emitted: the ones after the first (the prefill's) are judged at least
        assert stats["num_shadow_drafts"] >= first - 1, stats
        judged, accepted = judged + stats["num_shadow_drafts"], accepted + stats["num_shadow_accepted_drafts"]
        # speculation cannot repay anything on the tiny models (above), so the request rests (no policy asked,
        # nothing drafted or judged for it) before its first judgement and then until each next one is due
        assert stats["num_steps_resting"] >= stats["num_decode_steps"] // 2, stats
        # resting steps of a batch nobody in may draft run in plain bursts: fewer scheduler steps than decode steps
        assert out["meta_info"]["spec_verify_ct"] < stats["num_decode_steps"], (out["meta_info"], stats)
        # what its consecutive tokens reuse is measured (its later drafts are priced by it); that resting steps
        # measure it is checked in test_expert_budget_routing.py, where one step can be made to rest
        assert stats["expert_reuse"] is not None, stats
    logged = read_steps(steps)
    judging = [s for s in logged if s["shadow"] and not any(s["k"])]
    own = "judge_beside_ms" if draft == "llama-echo" else "judge_ms"  # the forward's own time
    assert judging and all(s[own] > 0 and s["draft_ms"] == 0 for s in judging), judging[:3]
    assert all(s["judge_ms"] == s["judge_beside_ms"] == 0 for s in logged if not s["shadow"]), logged[:3]
    if draft != "llama-echo":
        assert all(s["judge_beside_ms"] == 0 for s in logged), logged[:3]
    # a request's first judgement: after 2 emitted tokens (its second decode forward) where judgements run beside
    # the target's forward, after 4 (a rest of whole plain bursts before it) where they do not
    # (moe_serve_probe.JUDGE_AFTER_BESIDE)
    firsts = [[bool(s["shadow"]) for s in logged if rid in s["rids"]].index(True) for rid in rids]
    assert all(f == 1 for f in firsts) if draft == "llama-echo" else all(f >= 3 for f in firsts), firsts
    if accepting is None:
        assert (
            "on a thread beside the target's forwards"
            in engine_pool.logs[replace(config, settings=settings)].read_text()
        )
    elif accepting:
        assert accepted == judged, (accepted, judged)
    else:
        assert accepted <= 0.2 * judged, (accepted, judged)


@pytest.mark.parametrize("stop", ["margin", "head"])
def test_chains_that_all_stop_at_their_first_draft_decode_as_plain(
    plain_outputs, tiny_models, engine_pool, tmp_path, stop
):
    """Static K = 3 on the dense draft (its direct forward) with a stop no draft passes (draft_stop.py): a draft_stop
    ratio, or an acceptance head beside a copy of the draft that gives every draft p ~ 0 (the engine loads it, its
    log says so, and it alone stops the chains). Every chain stops at its first draft, so each speculative step
    verifies the requests' roots alone (a verify with no drafts in it). The output is plain decoding's; the step log
    shows speculative steps that verified nothing. (Stops part way down a chain: test_draft_forward.py,
    test_draft_stop.py.)"""
    config = spec_config("standalone-dense-chain", tiny_models)
    steps = tmp_path / "steps.jsonl"
    params = '{"static": {"k": 3, "draft_stop": 1e300}}'  # the echo draft's top two can be 1e9x apart and more
    if stop == "head":
        draft = tmp_path / "draft-with-head"
        shutil.copytree(config.speculation.draft_model_path, draft)
        hidden = json.loads((draft / "config.json").read_text())["hidden_size"]
        AcceptHead(torch.zeros(EXTRA + hidden), -50.0).save(draft)
        params = '{"static": {"k": 3, "accept_stop": 0.5}}'
        config = replace(config, speculation=replace(config.speculation, draft_model_path=str(draft)))
    config = replace(config, settings=replace(config.settings, policy_params_json=params, step_log=str(steps)))
    url = engine_pool.url(config)
    loaded = "chains stop by its acceptance head" in engine_pool.logs[config].read_text()
    assert loaded == (stop == "head")
    custom = {"moe_serve": {"policy": "static"}}
    rids = set()
    for (prompt, length), expected in plain_outputs.items():
        out = generate(url, list(prompt), length, ignore_eos=True, custom_params=custom)
        assert out["output_ids"] == expected, f"prompt {prompt[:6]}... diverged from plain decoding"
        rids.add(out["meta_info"]["id"])
    # this test's requests (the engine pool's warm-up request has no hints: SGLang's full depth, no stop)
    speculative = [s for s in read_steps(steps) if not s["plain"] and set(s["rids"]) <= rids]
    assert speculative and all(s["k"] == [3] * len(s["rids"]) for s in speculative), speculative[:3]
    assert all(v == 0 for s in speculative for v in s["verified"]), speculative[:3]
