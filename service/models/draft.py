"""Draft models for standalone speculation against the embedded MoE (issue 3).

(a) A small dense Llama trained by train.py on the same corpus and tokenizer.
(b) MoE-SpeQ's INT4 self-draft: the target with every expert weight quantized to INT4 (group 128, symmetric) and
    stored dequantized, while attention, norms, embeddings and router gates keep their exact values. Stored as
    values rather than packed INT4 so transformers and SGLang load it as an ordinary Mixtral checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from service.models.int4 import fake_quantize
from service.models.safetensors_io import expert_tensor_kind, map_checkpoint


@dataclass(frozen=True)
class DenseSpec:
    hidden_size: int = 192  # model width
    num_layers: int = 3  # decoder layers
    intermediate_size: int = 512  # MLP width
    num_heads: int = 3  # attention heads (= KV heads)
    head_dim: int = 64  # per head
    context: int = 256  # max positions

    def to_config(self, vocab_size: int, eos_id: int):
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.context,
            tie_word_embeddings=True,
            bos_token_id=eos_id,
            eos_token_id=eos_id,
            pad_token_id=eos_id,
        )


INT4_GROUP_SIZES = (128, 64, 32)  # preferred first: MoE-SpeQ's 128, then finer groups for narrow experts


def int4_group_size(target_dir: Path) -> int:
    """The largest of INT4_GROUP_SIZES dividing both input widths of the experts (hidden for w1/w3, the expert
    intermediate size for w2): 128 for moe-tiny (256/512), 32 for moe-fine's 96-wide experts."""
    config = json.loads((Path(target_dir) / "config.json").read_text())
    widths = (config["hidden_size"], config["intermediate_size"])
    for size in INT4_GROUP_SIZES:
        if all(w % size == 0 for w in widths):
            return size
    raise ValueError(f"{target_dir}: no INT4 group size in {INT4_GROUP_SIZES} divides expert widths {widths}")


def make_int4_self_draft(target_dir: Path, out_dir: Path, group_size: int | None = None) -> dict:
    """Copy target_dir to out_dir with expert weights replaced by their INT4 round trip; returns a report.
    group_size None: int4_group_size(target_dir)."""
    group_size = group_size or int4_group_size(target_dir)
    quantized = 0

    def transform(name, tensor):
        nonlocal quantized
        if expert_tensor_kind(name) is None:
            return tensor
        quantized += 1
        return fake_quantize(tensor, group_size)

    map_checkpoint(target_dir, out_dir, transform)
    if quantized == 0:
        raise ValueError(f"no expert tensors found in {target_dir}; is it a Mixtral checkpoint?")
    report = {"quantized_tensors": quantized, "group_size": group_size, "bits": 4, "symmetric": True}
    (out_dir / "int4_draft.json").write_text(json.dumps(report, indent=2))
    return report
