"""OpenAI / vLLM / SGLang request fields this gateway does not serve: refused with a 400 naming the field, because
dropping them (what happens to unknown fields) would answer a different request than the one asked, silently.

A field set to its "off" value (null, empty, `n`-like defaults) is accepted and ignored: clients send those by default.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_validator
from pydantic_core import PydanticCustomError


def _off(value: Any) -> bool:
    return value is None or value is False or value == "" or value == [] or value == {}


# field -> extra values that mean "off" for it (beyond _off)
_FIELDS: dict[str, tuple[Any, ...]] = {
    "logit_bias": (),
    "best_of": (1,),
    "suffix": (),
    "prompt_logprobs": (),
    "response_format": ({"type": "text"},),
    "tools": (),
    "tool_choice": ("none", "auto"),
    "functions": (),
    "function_call": ("none", "auto"),
    "audio": (),
    "modalities": (["text"],),
    "prediction": (),
    "guided_json": (),
    "guided_regex": (),
    "guided_choice": (),
    "guided_grammar": (),
    "json_schema": (),
    "regex": (),
    "ebnf": (),
    "structural_tag": (),
}
UNSUPPORTED = frozenset(_FIELDS)


class UnsupportedFields(BaseModel):
    """Mixed into the request models: declares the fields so a set one can be refused by name."""

    logit_bias: Any = None
    best_of: Any = None
    suffix: Any = None
    prompt_logprobs: Any = None
    response_format: Any = None
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    audio: Any = None
    modalities: Any = None
    prediction: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    json_schema: Any = None
    regex: Any = None
    ebnf: Any = None
    structural_tag: Any = None

    @field_validator(*_FIELDS)
    @classmethod
    def _refuse(cls, value: Any, info) -> Any:
        if _off(value) or value in _FIELDS[info.field_name]:
            return None
        raise PydanticCustomError(
            "unsupported_parameter",
            "'{field}' is not supported by this gateway; remove it or set it to null",
            {"field": info.field_name},
        )
