"""The CPU engine's rotary embedding: SGLang's `RotaryEmbedding.forward_native` for NeoX-style full-head rotation
done with per-step tables in 4 ops per tensor (service/kernels/rope.py), bit-identical to SGLang's result.

SGLang's native path is ~12 small ops per tensor per layer (index, chunks, four products, two sums, concatenations),
each a few microseconds of dispatch on a small CPU; `bench.attention_ops` times both paths per layer call. The tables depend only on the step's positions, which every layer receives as the same tensor, so they are
made once per step (kept while the positions tensor is the same object, unmodified). Everything else (partial or
GPT-J-style rotation, position offsets, precomputed `sin_cos_cache` variants, a dtype the cache does not share, the
fused KV-store argument) goes to SGLang's function unchanged.

Why a hook (touchpoints.py): on a CPU without SGLang's AMX weight packing the op's dispatch (BaseFusedOp) resolves
to forward_native; its CPU kernel branch is tied to `cpu_has_amx_support()` (plugin.py, point 6) and its
out-of-tree forward registry (`register_oot_forward`) serves only out-of-tree platforms.
"""

from __future__ import annotations

import torch

from service.kernels.rope import neox_tables, rotate_neox

TARGET = "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding.forward_native"
_STEP: list = []  # [positions, its version, cos_sin_cache, (cos_table, sin_table)] of the latest call


def install() -> None:
    from moe_sglang.touchpoints import hook

    hook(TARGET, rope_forward, "around")


def rope_forward(original, rope, positions, query, key, offsets=None, fused_set_kv_buffer_arg=None):
    """AROUND hook of RotaryEmbedding.forward_native: (query, key) rotated at `positions`."""
    if not _covered(rope, query, key, offsets, fused_set_kv_buffer_arg):
        return original(rope, positions, query, key, offsets, fused_set_kv_buffer_arg)
    cos_table, sin_table = _tables(rope.cos_sin_cache, positions)
    return (
        rotate_neox(query, rope.head_size, cos_table, sin_table),
        rotate_neox(key, rope.head_size, cos_table, sin_table),
    )


def sglang_rope(head_size: int, rotary_dim: int, max_positions: int, base: float, is_neox_style: bool = True):
    """SGLang's RotaryEmbedding as the CPU engine builds it, outside an engine (tests, bench.attention_ops): its
    constructor picks a kernel by the platform flags of its module, which only an engine process sets to CPU."""
    from sglang.srt.layers.rotary_embedding import base as rope_module

    saved, rope_module._is_cpu = rope_module._is_cpu, True
    try:
        return rope_module.RotaryEmbedding(head_size, rotary_dim, max_positions, base, is_neox_style, torch.float32)
    finally:
        rope_module._is_cpu = saved


def _covered(rope, query, key, offsets, fused_set_kv_buffer_arg) -> bool:
    return (
        rope.is_neox_style
        and rope.rotary_dim == rope.head_size
        and offsets is None
        and fused_set_kv_buffer_arg is None
        and not hasattr(rope, "sin_cos_cache")
        and query.dtype == key.dtype == rope.cos_sin_cache.dtype
        and query.device.type == "cpu"
    )


def _tables(cache: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if _STEP and _STEP[0] is positions and _STEP[1] == positions._version and _STEP[2] is cache:
        return _STEP[3]
    tables = neox_tables(cache, positions.flatten())
    _STEP[:] = [positions, positions._version, cache, tables]
    return tables
