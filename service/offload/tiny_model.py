"""A small random Mixtral for tests and for the benchmark when the bundled model is absent (always said so)."""

from __future__ import annotations


def tiny_random_mixtral(
    *,
    seed: int = 0,
    vocab_size: int = 256,
    hidden_size: int = 128,
    intermediate_size: int = 128,
    num_layers: int = 2,
    num_experts: int = 8,
    top_k: int = 2,
):
    """`MixtralForCausalLM` in fp32, eval mode, eager experts; hidden/intermediate multiples of 128 for INT4 groups."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        num_local_experts=num_experts,
        num_experts_per_tok=top_k,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = MixtralForCausalLM(config).eval()
    return model
