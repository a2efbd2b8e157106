"""The bundled models carry the chat template, and transformers renders it as format_chat (the corpus's chat share)."""

import json
from pathlib import Path

import pytest

from service.models.chat_template import CHAT_TEMPLATE, format_chat

ASSETS = Path(__file__).resolve().parents[2] / "service" / "models" / "assets"
CONVERSATION = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is 12 + 30?"},
    {"role": "assistant", "content": "12 + 30 = 42"},
    {"role": "user", "content": "And 7 * 6?"},
]


@pytest.mark.parametrize("model", ["moe-tiny", "moe-tiny-draft"])
def test_bundled_models_ship_the_template(model):
    config = json.loads((ASSETS / model / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE


@pytest.mark.parametrize("generation_prompt", [False, True])
def test_transformers_renders_format_chat(generation_prompt):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ASSETS / "moe-tiny"))
    rendered = tokenizer.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=generation_prompt)
    assert rendered == format_chat(CONVERSATION, add_generation_prompt=generation_prompt)


def test_saved_tokenizers_carry_the_template(tmp_path):
    from transformers import AutoTokenizer

    from service.models.tokenizer import save_hf_tokenizer, train_tokenizer

    save_hf_tokenizer(train_tokenizer({"prose": ["The quick brown fox. " * 40]}, vocab_size=300), tmp_path)
    assert AutoTokenizer.from_pretrained(str(tmp_path)).chat_template == CHAT_TEMPLATE
