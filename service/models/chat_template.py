"""The chat format of the bundled models: one Jinja template (shipped in tokenizer_config.json, applied by SGLang's
OpenAI chat endpoint) and the same format in Python, for the chat share of the training corpus.

A conversation renders as role-marked turns, each turn's text on the lines after its marker; an assistant turn ends
with the end-of-text token, so a model trained on it stops after answering:

    <|user|>
    What is 12 + 30?
    <|assistant|>
    12 + 30 = 42
    <|endoftext|>

`add_generation_prompt` appends the assistant marker, where the model's answer begins.
"""

from __future__ import annotations

from service.models.corpus import DOC_SEPARATOR

ROLES = ("system", "user", "assistant")

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' -%}{{ eos_token }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}"
)


def format_chat(messages: list[dict[str, str]], add_generation_prompt: bool = False, eos: str = DOC_SEPARATOR) -> str:
    """The text CHAT_TEMPLATE renders for `messages` (roles from ROLES; the test suite checks the two agree)."""
    parts = []
    for message in messages:
        role = message["role"]
        if role not in ROLES:
            raise ValueError(f"chat role {role!r}: expected one of {ROLES}")
        parts.append(f"<|{role}|>\n{message['content']}\n")
        if role == "assistant":
            parts.append(eos)
    if add_generation_prompt:
        parts.append("<|assistant|>\n")
    return "".join(parts)
