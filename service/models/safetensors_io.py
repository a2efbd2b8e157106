"""Tensor-wise rewriting of a Hugging Face checkpoint directory on disk (used by inflation and the INT4 draft).

transformers writes Mixtral experts per expert — `...experts.<e>.w1.weight` / `w3` `[I, H]` and `w2` `[H, I]` —
and fuses them only in memory, so on-disk tools work on those names (see /work/shared/notes/tiny-model.md).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

_EXPERT = re.compile(r"\.experts\.\d+\.(w1|w2|w3)\.weight$")


def expert_tensor_kind(name: str) -> str | None:
    """'w1' (gate), 'w3' (up), 'w2' (down) for a per-expert Mixtral weight, else None."""
    match = _EXPERT.search(name)
    return match.group(1) if match else None


def map_checkpoint(src: Path, dst: Path, transform: Callable[[str, torch.Tensor], torch.Tensor]) -> None:
    """Copy src to dst, passing every tensor of every *.safetensors file through transform(name, tensor)."""
    from safetensors.torch import load_file, save_file

    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {src}")
    if dst.resolve() == src.resolve():
        raise ValueError("destination must differ from source")
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.is_file() and item.suffix != ".safetensors":
            shutil.copy2(item, dst / item.name)
    for file in files:
        tensors = load_file(str(file))
        save_file(
            {name: transform(name, t).contiguous() for name, t in tensors.items()},
            str(dst / file.name),
            metadata={"format": "pt"},
        )
