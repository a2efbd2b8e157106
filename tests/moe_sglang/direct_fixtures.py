"""What the direct-forward tests (test_draft_forward.py, test_target_forward.py) share: a transformers model with
weights large enough that logits and routing differ by a lot, SGLang's fused QKV weight of a transformers layer, a KV
pool whose unwritten slots are NaN (a read of a slot the forward did not write poisons the result) and two requests'
slot rows."""

from types import SimpleNamespace

import torch


def spread_weights(model):
    """`model` (float32, eval) with its matrices ~N(0, 2 / fan_in) and its vectors ~U(0.5, 1.5): larger than the
    init's 0.02, so a wrong op moves the logits far beyond rounding."""
    model = model.float().eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 2.0 / param.shape[-1] ** 0.5)
            else:
                param.uniform_(0.5, 1.5)
    return model


def fused_qkv(attn) -> torch.Tensor:
    """SGLang's qkv_proj weight [q + 2 kv, hidden] of a transformers attention module."""
    return torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])


def nan_pool(layers: int, slots: int, kv_heads: int, head_dim: int):
    """A KV pool as the direct forwards read it (get_key_buffer / get_value_buffer(layer) -> [slots, kv_heads, D]),
    every slot NaN until written; `.keys` is the list of key buffers."""
    keys = [torch.full((slots, kv_heads, head_dim), float("nan")) for _ in range(layers)]
    values = [torch.full((slots, kv_heads, head_dim), float("nan")) for _ in range(layers)]
    return SimpleNamespace(get_key_buffer=keys.__getitem__, get_value_buffer=values.__getitem__, keys=keys)


def two_request_slots(context: int) -> torch.Tensor:
    """req_to_token [2, context] int32: request 0's positions in slots [0, context), request 1's after them."""
    return torch.stack([torch.arange(context), torch.arange(context, 2 * context)]).int()
