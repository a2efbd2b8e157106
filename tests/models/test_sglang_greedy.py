"""Issue 3 'must show': the shipped checkpoint, and its inflated copy, give transformers' greedy output in SGLang on CPU.

Needs the real engine (marker `sglang`); runs with SGLang's plain CPU path. Without the project's CPU ops
(the engine issue) SGLang 0.5.23 with attention_backend="torch_native" returned token 0 at every position
(measured 2026-11-22), so this test is the
acceptance check for that integration.
"""

import pytest
import torch

from service.models.inflate import inflate_checkpoint

from .test_assets import TARGET

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
PROMPTS = ["def fibonacci(n):\n", "This program is free software; you can redistribute it", "Compute (12 + 7) * 3.\n"]


def _transformers_greedy(path, ids, new_tokens):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    options = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
    with torch.no_grad():
        return [model.generate(torch.tensor([i]), **options)[0, len(i) :].tolist() for i in ids]


def _sglang_greedy(path, ids, new_tokens, monkeypatch):
    sgl = pytest.importorskip("sglang")
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "1")
    engine = sgl.Engine(
        model_path=str(path),
        device="cpu",
        dtype="float32",
        disable_cuda_graph=True,
        max_total_tokens=4096,
        skip_server_warmup=True,
        log_level="error",
    )
    try:
        outs = engine.generate(
            input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}
        )
    finally:
        engine.shutdown()
    return [o["output_ids"] for o in outs]


@pytest.mark.parametrize("inflated", [False, True])
def test_sglang_greedy_matches_transformers(inflated, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    path = TARGET
    if inflated:
        path = tmp_path / "inflated"
        inflate_checkpoint(TARGET, path, 2048)
    ids = [AutoTokenizer.from_pretrained(str(TARGET))(p).input_ids for p in PROMPTS]
    assert _sglang_greedy(path, ids, 24, monkeypatch) == _transformers_greedy(path, ids, 24)
