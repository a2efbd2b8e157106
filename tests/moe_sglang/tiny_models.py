"""Tiny random MoE checkpoints in Hugging Face format, made by the tests (until/besides the bundled model).

Weights are random but scaled up so next-token logits have clear winners: greedy comparisons across engines
then test the computation, not float ties. Deterministic from the seed.
"""

from __future__ import annotations

from pathlib import Path

TEXT = (
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i * i)\n"
    "The quick brown fox jumps over the lazy dog. 12 + 30 = 42. 7 * 6 = 42.\n"
) * 20

ARCHS = ("mixtral", "qwen2_moe", "olmoe")

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def make_tokenizer(path: Path, vocab_size: int = 320) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([TEXT], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    # A minimal chat template so /v1/chat/completions has something to render.
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)


def _config(arch: str, vocab_size: int, hidden: int, layers: int, experts: int):
    import transformers

    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,  # SGLang's OLMoE requires kv_heads == heads; keep all archs alike
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    if arch == "mixtral":
        return transformers.MixtralConfig(
            intermediate_size=2 * hidden, num_local_experts=experts, num_experts_per_tok=2, **common
        )
    if arch == "qwen2_moe":
        return transformers.Qwen2MoeConfig(
            intermediate_size=2 * hidden,
            moe_intermediate_size=hidden,
            shared_expert_intermediate_size=hidden,
            num_experts=experts,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            norm_topk_prob=False,
            **common,
        )
    if arch == "llama":  # a dense draft model (moe_sglang/draft_forward.py runs it without SGLang's runner)
        return transformers.LlamaConfig(intermediate_size=2 * hidden, **common)
    if arch == "olmoe":
        return transformers.OlmoeConfig(intermediate_size=hidden, num_experts=experts, num_experts_per_tok=2, **common)
    raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")


def make_checkpoint(
    path: Path,
    arch: str = "mixtral",
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    experts: int = 8,
    echo: float = 0.0,
    bf16_values: bool = False,
) -> Path:
    """Write a random `arch` checkpoint (fp32 safetensors + tokenizer) to `path` and return it.

    echo > 0 makes an "echo" model: the output head is the input embedding and the embedding is scaled by `echo`,
    so the residual stream favours repeating recent tokens while attention and experts still change the choice.
    Greedy output then falls into loops now and then, which gives n-gram and self drafts something to accept
    (a plain random model almost never repeats itself, so every draft would be rejected).

    bf16_values rounds every weight to a bfloat16 value (still saved as float32): a bfloat16 checkpoint as the engine
    loads it, whose experts the CPU engine keeps as bfloat16 (moe_sglang/cpu_moe.py)."""
    import torch
    import transformers

    path.mkdir(parents=True, exist_ok=True)
    make_tokenizer(path)
    vocab = len(transformers.AutoTokenizer.from_pretrained(path))
    config = _config(arch, vocab, hidden, layers, experts)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2 and "norm" not in name:
                param.normal_(0.0, 0.5 / param.shape[-1] ** 0.5 * 4)
        if echo:
            model.lm_head.weight.copy_(model.model.embed_tokens.weight * 4)
            model.model.embed_tokens.weight.mul_(echo)
        if bf16_values:
            for param in model.parameters():
                param.copy_(param.to(torch.bfloat16).to(torch.float32))
    model.save_pretrained(path)
    return path
