"""Tiny random Mixtral checkpoints for the model-tool tests (seconds on one CPU thread)."""

from __future__ import annotations

import pytest
import torch


def tiny_mixtral_config(vocab_size: int = 64, intermediate_size: int = 32):
    from transformers import MixtralConfig

    return MixtralConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )


def tiny_llama_config(vocab_size: int = 64):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def tiny_checkpoint(tmp_path):
    """A saved random Mixtral (fp32) with 128-wide experts so INT4 groups of 128 fit."""
    from transformers import MixtralForCausalLM

    torch.manual_seed(0)
    model = MixtralForCausalLM(tiny_mixtral_config(intermediate_size=128)).eval()
    path = tmp_path / "tiny"
    model.save_pretrained(str(path))
    return path
