"""Sampled output with speculation follows the target model's distribution (lossless speculative sampling).

Randomised probability-integral transform: if token x_t is drawn from p_t = softmax(logits_t / T) given its prefix,
u_t = CDF_t(x_t - 1) + V * p_t(x_t) with V ~ U(0, 1) is exactly uniform and independent across t and requests. We
pool u over every token produced by verify steps of many seeded requests, compute p_t with transformers, and test
uniformity with Kolmogorov-Smirnov. A sampler biased towards accepting drafts (or greedy-like) fails it.

Requests go one after another: NGRAM's n-gram cache is shared by all requests, so with concurrent requests the
drafts (and so which random coins decide each token) would depend on how requests interleave. Sequential seeded
requests make the whole test deterministic. Request i may accept at most K = i mod 4 drafts (the static policy's
per-request hint), so plain steps and every ragged verify width are in the sample.
"""

import pytest

from tests.engine import engine_config, generate
from tests.moe_sglang.prompts import REPETITIVE

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

TEMPERATURE = 0.7
REQUESTS, NEW_TOKENS = 160, 12


def pit_values(model_path, samples, temperature, seed=0):
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    values = []
    for prompt, output in samples:
        ids = torch.tensor([prompt + output])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1].double()  # [len(output), V]
        probs = torch.softmax(logits / temperature, dim=-1)
        cdf = torch.cumsum(probs, dim=-1)
        tokens = torch.tensor(output)
        p_x = probs[torch.arange(len(output)), tokens]
        below = cdf[torch.arange(len(output)), tokens] - p_x
        # position 0 comes from prefill (no speculation): keep only verify-step tokens
        values += (below + torch.rand(len(output), generator=g, dtype=torch.float64) * p_x)[1:].tolist()
    return values


SPECS = {  # the configs test_speculative_greedy starts too (metrics on): the session's engine pool shares them
    "ngram": dict(algorithm="ngram", topk=1, num_draft_tokens=4),
    "standalone": dict(algorithm="standalone", num_steps=3, topk=1, num_draft_tokens=4),
}


@pytest.mark.parametrize("algorithm", list(SPECS))
def test_speculative_sampling_is_lossless(algorithm, tiny_models, engine_pool):
    from scipy import stats

    model = tiny_models["mixtral-echo"]
    spec = dict(SPECS[algorithm])
    if algorithm == "standalone":
        spec["draft_model_path"] = str(model)
    url = engine_pool.url(engine_config(model, metrics=True, **spec))
    prompt = REPETITIVE[1]
    sampling = dict(temperature=TEMPERATURE, top_p=1.0, top_k=-1, min_p=0.0, ignore_eos=True)

    def one(seed):
        hints = {"moe_serve": {"policy": "static", "max_k": seed % 4}}
        out = generate(url, prompt, NEW_TOKENS, sampling_seed=seed, custom_params=hints, **sampling)
        return out["output_ids"], out["meta_info"]

    results = [one(seed) for seed in range(REQUESTS)]
    accepted = sum(m["spec_accept_length"] for _, m in results) / len(results)
    assert accepted > 1.1, f"speculation hardly accepted anything at T={TEMPERATURE} (mean accept length {accepted})"

    u = pit_values(model, [(prompt, ids) for ids, _ in results], TEMPERATURE)
    ks = stats.kstest(u, "uniform")
    assert ks.pvalue > 1e-3, (
        f"sampled tokens do not follow the target distribution: KS={ks.statistic:.4f} p={ks.pvalue:.2e}"
    )
