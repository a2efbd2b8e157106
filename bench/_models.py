"""Model checkpoints for benches: the bundled default, its function-preserving inflated variant, and their shape."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from moe_sglang.launch import DEFAULT_MODEL


@dataclass(frozen=True)
class MoeCheckpoint:
    path: Path  # HF checkpoint folder
    num_experts: int  # routed experts per MoE layer
    top_k: int  # experts per token
    num_layers: int  # MoE layers
    hidden: int  # hidden size
    intermediate: int  # expert intermediate size
    context: int  # max positions

    @property
    def expert_params(self) -> int:  # parameters of one expert (w1, w3: [I, H]; w2: [H, I])
        return 3 * self.hidden * self.intermediate


def resolve_model(path: str | None) -> Path:
    model = Path(path) if path else DEFAULT_MODEL
    if not (model / "config.json").exists():
        raise SystemExit(f"no checkpoint at {model}: pass --model PATH (the bundled model is built by issue 3)")
    return model


def read_checkpoint(path: Path) -> MoeCheckpoint:
    config = json.loads((path / "config.json").read_text())
    if config.get("model_type") != "mixtral":
        raise ValueError(f"{path}: a {config.get('model_type')!r} checkpoint; these benches need mixtral")
    return MoeCheckpoint(
        path=path,
        num_experts=config["num_local_experts"],
        top_k=config["num_experts_per_tok"],
        num_layers=config["num_hidden_layers"],
        hidden=config["hidden_size"],
        intermediate=config["intermediate_size"],
        context=config.get("max_position_embeddings", 2048),
    )


def inflated(src: Path, dst: Path, factor: int) -> Path:
    """`src` with every expert's intermediate size times `factor` (zero units: same function, more bytes);
    tokenizer and other files are copied along (service.models.safetensors_io.map_checkpoint)."""
    from service.models.inflate import inflate_checkpoint

    if not (dst / "config.json").exists():
        inflate_checkpoint(src, dst, read_checkpoint(src).intermediate * factor)
    return dst
