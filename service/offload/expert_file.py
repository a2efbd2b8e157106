"""The slow tier: every expert of a Mixtral model in one safetensors file, read through a memory map.

On disk each expert is two tensors, `layers.<l>.experts.<e>.w13 [2I, H]` (gate rows then up rows, transformers' in-memory
fused order, notes/tiny-model.md) and `layers.<l>.experts.<e>.w2 [H, I]`. `ExpertFile.read` copies one expert out of the
mapping into fresh tensors: that copy is the "transfer" whose bandwidth the store measures (on a GPU the same bytes would
cross PCIe). The header is parsed here rather than through safetensors' loader so a read touches only that expert's pages.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import numpy as np
import torch

# safetensors dtype → (numpy dtype to copy with, torch dtype to view as); bf16 travels as raw 16-bit words.
_DTYPES = {"F32": (np.float32, torch.float32), "F16": (np.float16, torch.float16), "BF16": (np.uint16, torch.bfloat16)}


def expert_tensor_name(layer: int, expert: int, part: str) -> str:
    return f"layers.{layer}.experts.{expert}.{part}"


def write_expert_file(experts: list[tuple[torch.Tensor, torch.Tensor]], path: Path) -> Path:
    """`experts[l] = (gate_up [E, 2I, H], down [E, H, I])` per MoE layer → one safetensors file at `path`."""
    from safetensors.torch import save_file

    if not experts:
        raise ValueError("no MoE layers to write")
    tensors = {}
    for layer, (gate_up, down) in enumerate(experts):
        if gate_up.dim() != 3 or down.dim() != 3 or gate_up.shape[0] != down.shape[0]:
            raise ValueError(
                f"layer {layer}: need gate_up [E, 2I, H] and down [E, H, I], got {gate_up.shape}, {down.shape}"
            )
        for expert in range(gate_up.shape[0]):
            tensors[expert_tensor_name(layer, expert, "w13")] = gate_up[expert].detach().contiguous().clone()
            tensors[expert_tensor_name(layer, expert, "w2")] = down[expert].detach().contiguous().clone()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


class ExpertFile:
    """Read-only memory map over a file written by `write_expert_file`; `read` is safe from several threads."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        (header_len,) = struct.unpack("<Q", self._map[:8])
        header = json.loads(self._map[8 : 8 + header_len])
        header.pop("__metadata__", None)
        self._base = 8 + header_len
        self._entries = {
            name: (_DTYPES[e["dtype"]], tuple(e["shape"]), tuple(e["data_offsets"])) for name, e in header.items()
        }
        layers = {int(name.split(".")[1]) for name in self._entries}
        self.num_layers = len(layers)
        self.num_experts = sum(1 for name in self._entries if name.startswith("layers.0.") and name.endswith(".w13"))
        if layers != set(range(self.num_layers)) or len(self._entries) != 2 * self.num_layers * self.num_experts:
            raise ValueError(f"{self.path} is not a complete expert file (layers {sorted(layers)})")
        self.expert_bytes = sum(
            self._entries[n][2][1] - self._entries[n][2][0] for n in self._names(0, 0)
        )  # bytes per expert

    def read(self, layer: int, expert: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy expert `(layer, expert)` out of the map: `(w13 [2I, H], w2 [H, I])`, fresh tensors."""
        if not (0 <= layer < self.num_layers and 0 <= expert < self.num_experts):
            raise KeyError(f"no expert ({layer}, {expert}) in {self.path}")
        return tuple(self._tensor(name) for name in self._names(layer, expert))  # type: ignore[return-value]

    def _names(self, layer: int, expert: int) -> tuple[str, str]:
        return expert_tensor_name(layer, expert, "w13"), expert_tensor_name(layer, expert, "w2")

    def _tensor(self, name: str) -> torch.Tensor:
        (np_dtype, torch_dtype), shape, (start, end) = self._entries[name]
        # numpy reads a read-only buffer without complaint (torch.frombuffer warns); .copy() is the transfer.
        words = np.frombuffer(
            self._map, dtype=np_dtype, count=(end - start) // np.dtype(np_dtype).itemsize, offset=self._base + start
        )
        return torch.from_numpy(words.copy()).view(torch_dtype).reshape(shape)

    def close(self) -> None:
        self._map.close()
