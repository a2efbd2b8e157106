"""SGLang on CPU (intel_amx backend backed by our torch ops) == transformers, token for token, greedy, per MoE arch."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from moe_sglang.process_start import FORKED
from moe_sglang.target_forward import _LM_HEAD_BF16
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
    """One request at a time, then all together (batched decode steps); a Mixtral's decode steps run moe-serve's
    direct forward (target_forward.py, its MoE sublayers inline: inline_moe.py, its attention sublayers by the C++
    op: decode_attention.py; the engine log says so), the other architectures SGLang's."""
    config = engine_config(tiny_models[arch])
    url = engine_pool.url(config)
    prompts = REPETITIVE[:2] + random_prompts(2, 12, vocab=300)
    expected = [transformers_greedy(tiny_models[arch], prompt, NEW_TOKENS) for prompt in prompts]
    for prompt, want in zip(prompts, expected, strict=True):
        got = generate(url, prompt, NEW_TOKENS, ignore_eos=True)["output_ids"]
        assert got == want, f"{arch} prompt {prompt[:6]}..."
    with ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: generate(url, p, NEW_TOKENS, ignore_eos=True)["output_ids"], prompts))
    assert together == expected, f"{arch}: batched decode differs"
    log = engine_pool.logs[config].read_text()
    assert ("target model: direct decode forward" in log) == (arch == "mixtral")
    # its decode attention sublayers one C++ call each (service/kernels/decode_attention.py)
    assert ("attention decode_attention op" in log) == (arch == "mixtral")
    # and its MoE sublayers too (service/kernels/decode_moe.py), said when one has run
    assert ("MoE sublayers ran by the decode_moe op" in log) == (arch == "mixtral")
    assert "MoE through SGLang's modules" not in log  # a Mixtral's MoE sublayers ran inline (inline_moe.py)
    assert FORKED in log  # the default process start on CPU (process_start.py)


def test_bfloat16_valued_experts_are_kept_narrow_and_greedy_equals_transformers(tiny_models, engine_pool):
    """The echo Mixtral's weights are bfloat16 values (a bfloat16 checkpoint as loaded): the engine keeps its experts
    as bfloat16 (cpu_moe.py, the log says so) and still decodes what transformers decodes in float32."""
    config = engine_config(tiny_models["mixtral-echo"])
    url = engine_pool.url(config)
    for prompt in [*random_prompts(2, 10, vocab=300, seed=5), REPETITIVE[0]]:
        got = generate(url, prompt, NEW_TOKENS, ignore_eos=True)["output_ids"]
        assert got == transformers_greedy(tiny_models["mixtral-echo"], prompt, NEW_TOKENS), prompt
    log = engine_pool.logs[config].read_text()
    assert "kept as bfloat16 (every value exact)" in log
    assert "MoE sublayers ran by the decode_moe op" in log
    assert f"LM head {_LM_HEAD_BF16})" in log, "its LM head read as bfloat16 too (target_forward.py)"
