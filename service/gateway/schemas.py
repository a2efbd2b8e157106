"""Request bodies the gateway accepts: the OpenAI fields users expect, bounded so bad input is a 400, never a 5xx.

Unknown fields are dropped, not forwarded: engine-only fields (`rid`, `priority`, `custom_params`,
`custom_logit_processor`, ...) are the gateway's to set, and a custom logit processor is serialized code.
Known OpenAI / vLLM fields the gateway does not serve are refused by name instead (unsupported.py); the
`speculation` extension field is the gateway's own (speculation.py) and never forwarded as sent.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from service.gateway.speculation import SpeculationRequest
from service.gateway.unsupported import UNSUPPORTED, UnsupportedFields

INT64 = 2**63 - 1
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
StopList = Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=16)]
MAX_LOGPROBS = 20  # alternatives per token, as vLLM's default --max-logprobs (OpenAI allows 5 on completions)
GATEWAY_ONLY = {"stream_options", "user", "speculation", *UNSUPPORTED}  # validated here, never forwarded as sent


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class SamplingFields(UnsupportedFields):
    """Fields common to completions and chat; names and defaults as in the OpenAI API (+ SGLang's top_k/min_p)."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=256)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1, le=1_000_000)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=-INT64 - 1, le=INT64)
    stop: Annotated[str, Field(min_length=1)] | StopList | None = None
    n: int = Field(default=1, ge=1, le=16)
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)
    speculation: SpeculationRequest | None = None

    def engine_fields(self) -> dict:
        """The fields to forward, without unset ones (so the engine's own defaults apply)."""
        fields = self.model_dump(exclude_none=True, exclude=GATEWAY_ONLY)
        if fields.get("top_k") == 0:
            fields.pop("top_k")  # OpenAI-style clients send 0 for "off"; SGLang's "off" is -1
        return fields


class CompletionRequest(SamplingFields):
    prompt: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=64)]
        | Annotated[list[TokenId], Field(min_length=1)]
        | Annotated[list[Annotated[list[TokenId], Field(min_length=1)]], Field(min_length=1, max_length=64)]
    )
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)  # top alternatives per token; 0 = chosen only


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | Annotated[list[TextPart], Field(min_length=1)] | None = None
    name: str | None = Field(default=None, max_length=256)
    tool_call_id: str | None = Field(default=None, max_length=256)


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=1024)]
    max_completion_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)

    @field_validator("top_logprobs")
    @classmethod
    def _needs_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")  # OpenAI's rule too
        return value

    def engine_fields(self) -> dict:
        fields = super().engine_fields()
        fields["messages"] = [m.model_dump(exclude_none=True) for m in self.messages]
        legacy_cap = fields.pop("max_tokens", None)
        if "max_completion_tokens" not in fields and legacy_cap is not None:
            fields["max_completion_tokens"] = legacy_cap  # SGLang deprecates max_tokens on chat; the newer name wins
        return fields

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def prompt_sizes(request: CompletionRequest | ChatCompletionRequest) -> list[tuple[int, int]]:
    """Per prompt: (UTF-8 bytes of text, token ids given directly or template overhead), for the token estimate."""
    if isinstance(request, ChatCompletionRequest):
        text = 0
        for message in request.messages:
            if isinstance(message.content, str):
                text += len(message.content.encode())
            elif message.content:
                text += sum(len(part.text.encode()) for part in message.content)
        return [(text, 4 * len(request.messages))]  # ~4 chat-template tokens per message (role markers)
    prompt = request.prompt
    if isinstance(prompt, str):
        return [(len(prompt.encode()), 0)]
    if all(isinstance(p, int) for p in prompt):
        return [(0, len(prompt))]
    return [(len(p.encode()), 0) if isinstance(p, str) else (0, len(p)) for p in prompt]
