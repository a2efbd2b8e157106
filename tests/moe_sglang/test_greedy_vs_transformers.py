"""SGLang on CPU (intel_amx backend backed by our torch ops) == transformers, token for token, greedy, per MoE arch."""

import pytest

from tests.engine import engine_config, generate
from tests.moe_sglang.prompts import REPETITIVE, random_prompts

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

NEW_TOKENS = 24


def transformers_greedy(model_path, prompt: list[int], new_tokens: int) -> list[int]:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    ids = torch.tensor([prompt])
    out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, min_new_tokens=new_tokens)
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe", "olmoe"])
def test_plain_greedy_equals_transformers(arch, tiny_models, engine_pool):
    url = engine_pool.url(engine_config(tiny_models[arch]))
    for prompt in REPETITIVE[:2] + random_prompts(2, 12, vocab=300):
        got = generate(url, prompt, NEW_TOKENS, ignore_eos=True)["output_ids"]
        assert got == transformers_greedy(tiny_models[arch], prompt, NEW_TOKENS), f"{arch} prompt {prompt[:6]}..."
