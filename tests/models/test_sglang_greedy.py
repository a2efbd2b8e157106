"""Issue 3 'must show': the shipped checkpoint, and its inflated copy, give transformers' greedy output in SGLang on CPU.
Issue 16: the same for the fine-grained sparse model (moe-fine, 32 experts top-4; one more engine start).

Needs the real engine (marker `sglang`), launched as `moe-serve engine` launches it (our plugin, CPU ops). The
checkpoint stores its output head explicitly: SGLang's Mixtral ignores `tie_word_embeddings`, and a tied checkpoint
generated token 0 at every position there (measured 2026-11-22) while transformers was fine.
"""

import pytest
import torch

from service.models.inflate import inflate_checkpoint
from tests.engine import engine_config, generate

from .test_assets import ASSETS, TARGET

FINE = ASSETS / "moe-fine"

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
PROMPTS = ["def fibonacci(n):\n", "This program is free software; you can redistribute it", "Compute (12 + 7) * 3.\n"]


def _transformers_greedy(path, ids, new_tokens):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    options = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
    with torch.no_grad():
        return [model.generate(torch.tensor([i]), **options)[0, len(i) :].tolist() for i in ids]


def _sglang_greedy(engine_pool, path, ids, new_tokens):
    url = engine_pool.url(engine_config(path))
    return [generate(url, i, new_tokens, ignore_eos=True)["output_ids"] for i in ids]


@pytest.fixture(scope="module")
def inflated(tmp_path_factory):
    path = tmp_path_factory.mktemp("inflated") / "moe-tiny-x4"
    inflate_checkpoint(TARGET, path, 2048)
    return path


@pytest.mark.parametrize("variant", ["shipped", "inflated", "fine"])
def test_sglang_greedy_matches_transformers(variant, inflated, engine_pool):
    from transformers import AutoTokenizer

    path = {"shipped": TARGET, "inflated": inflated, "fine": FINE}[variant]
    ids = [AutoTokenizer.from_pretrained(str(TARGET))(p).input_ids for p in PROMPTS]
    expected = _transformers_greedy(path, ids, 24)
    assert _sglang_greedy(engine_pool, path, ids, 24) == expected
    if variant == "inflated":
        assert expected == _transformers_greedy(TARGET, ids, 24), "inflation changed the function"
