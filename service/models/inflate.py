"""Function-preserving expert inflation (issue 3): widen every expert's intermediate size with zero units.

An expert computes  w2 · (SiLU(w1 x) ⊙ (w3 x)).  New hidden units get zero rows in w1 and w3, so their
activation is SiLU(0) · 0 = 0, and zero columns in w2, so they contribute nothing either way. Tokens and routing
stay exactly those of the source model while every expert's weights grow: decode and verify on CPU then become
memory-bound in the number of unique experts touched, like a large MoE on a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from service.models.safetensors_io import expert_tensor_kind, map_checkpoint


def pad_expert_weight(kind: str, weight: torch.Tensor, new_intermediate: int) -> torch.Tensor:
    """w1/w3 [I, H] -> [I', H] with zero rows; w2 [H, I] -> [H, I'] with zero columns."""
    axis = 1 if kind == "w2" else 0
    current = weight.shape[axis]
    if new_intermediate < current:
        raise ValueError(f"cannot shrink an expert from {current} to {new_intermediate} units")
    pad_shape = list(weight.shape)
    pad_shape[axis] = new_intermediate - current
    return torch.cat([weight, weight.new_zeros(pad_shape)], dim=axis)


def inflate_checkpoint(src: Path, dst: Path, new_intermediate: int) -> dict:
    """Write an inflated copy of the Mixtral checkpoint src into dst; returns a size report."""
    config = json.loads((src / "config.json").read_text())
    if config.get("model_type") != "mixtral":
        raise ValueError(f"{src} is a {config.get('model_type')!r} checkpoint; inflation needs mixtral")
    old = config["intermediate_size"]
    if new_intermediate < old:
        raise ValueError(f"--intermediate-size {new_intermediate} is below the current {old}")

    def transform(name: str, tensor: torch.Tensor) -> torch.Tensor:
        kind = expert_tensor_kind(name)
        return tensor if kind is None else pad_expert_weight(kind, tensor, new_intermediate)

    map_checkpoint(src, dst, transform)
    (dst / "config.json").write_text(json.dumps({**config, "intermediate_size": new_intermediate}, indent=2) + "\n")
    size = sum(f.stat().st_size for f in dst.glob("*.safetensors"))
    return {"intermediate_size": [old, new_intermediate], "safetensors_bytes": size, "out": str(dst)}


def factor_for_weight_share(expert_ms: float, dense_ms: float, step_ms: float, goal: float) -> float:
    """Expert-size factor F at which weight products take `goal` of a step: (dense + F*expert) / (step + (F-1)*expert)
    = goal, from a measured decode step (bench.step_profile) where expert products took `expert_ms`, the other weight
    products `dense_ms` and the whole step `step_ms`. Expert time is taken to grow with F (memory-bound products),
    everything else to stay. At least 1 (a model already past the goal needs no inflation)."""
    if not 0 < goal < 1:
        raise ValueError(f"the weight share goal must lie in (0, 1), got {goal}")
    if expert_ms <= 0 or step_ms < expert_ms + dense_ms:
        raise ValueError(f"need 0 < expert_ms and expert_ms + dense_ms <= step_ms, got {expert_ms, dense_ms, step_ms}")
    rest = step_ms - expert_ms - dense_ms
    return max(1.0, (goal * rest / (1 - goal) - dense_ms) / expert_ms)


def intermediate_for_weight_share(profile: dict, model_name: str, intermediate: int, goal: float) -> int:
    """Expert intermediate size for `goal` from a bench.step_profile JSON: its batch-1 decode row of `model_name`
    (the batched-attention variant when there are several), rounded up to a multiple of 64."""
    rows = [
        r
        for r in profile["rows"]
        if r["model"] == model_name and r["stage"] == "decode" and r["batch"] == 1
        and r.get("variant", "batched") == "batched"
    ]  # fmt: skip
    if not rows:
        raise ValueError(f"the profile has no batch-1 decode row of {model_name!r} (batched attention)")
    row = rows[0]
    factor = factor_for_weight_share(row["expert_gemm_ms"], row["dense_gemm_ms"], row["step_ms"], goal)
    return -(-int(intermediate * factor) // 64) * 64


@torch.no_grad()
def verify_inflation(src: Path, dst: Path, prompts: list[list[int]], new_tokens: int = 16) -> dict:
    """Compare the two checkpoints in transformers: max |logit difference| and greedy agreement per prompt."""
    from transformers import MixtralForCausalLM

    original = MixtralForCausalLM.from_pretrained(str(src), dtype=torch.float32).eval()
    inflated = MixtralForCausalLM.from_pretrained(str(dst), dtype=torch.float32).eval()
    max_diff, identical = 0.0, 0
    for prompt in prompts:
        ids = torch.tensor([prompt])
        max_diff = max(max_diff, (original(input_ids=ids).logits - inflated(input_ids=ids).logits).abs().max().item())
        options = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
        identical += torch.equal(original.generate(ids, **options), inflated.generate(ids, **options))
    return {"max_logit_diff": max_diff, "greedy_identical": identical, "prompts": len(prompts)}
