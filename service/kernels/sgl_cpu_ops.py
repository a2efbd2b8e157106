"""The sgl_kernel CPU op table: schema + plain-torch implementation, and their registration with torch.library.

Schemas follow SGLang 0.5.23's CPU call sites (intel_amx_backend.py, sgl_kernel 0.4.10's speculative.py and
kvcacheio.py wrappers), which call these ops positionally; `(a!)` marks the tensors an op writes in place.
`tree_speculative_sampling_target_only_cpu` has no compiled CPU counterpart: SGLang's sampled verify path never reaches
a kernel on CPU (eagle_utils._verify_uses_greedy is true on CPU), so the integration layer wires it in explicitly.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from service.kernels.attention_cpu import (
    decode_attention_cpu,
    decode_attention_loop,
    extend_attention_cpu,
    extend_attention_loop,
)
from service.kernels.attention_fused import decode_attention_fused, extend_attention_fused
from service.kernels.cache_locs import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    build_draft_decode_metadata_cpu,
    fill_accept_out_cache_loc_cpu,
)
from service.kernels.draft_inputs import rotate_input_ids_cpu
from service.kernels.kv_slot_copy import copy_all_layer_kv_cache_cpu
from service.kernels.murmur_hash import murmur_hash32_cpu
from service.kernels.rejection_sampling import tree_speculative_sampling_target_only_cpu
from service.kernels.spec_tree import build_tree_kernel_efficient_cpu, reconstruct_indices_from_tree_mask_cpu
from service.kernels.spec_verify import fill_bonus_tokens_cpu, verify_tree_greedy_cpu


@dataclass(frozen=True)
class CpuOp:
    schema: str  # torch op schema, name included
    impl: Callable[..., object]  # plain-torch implementation, same positional arguments

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]


def _fake_draft_decode_metadata(req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len):
    return req_to_token.new_empty((req_pool_indices.shape[0] * topk, pool_len))


OPS: tuple[CpuOp, ...] = (
    CpuOp(
        "copy_all_layer_kv_cache_cpu(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()",
        copy_all_layer_kv_cache_cpu,
    ),
    CpuOp(
        "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
        "Tensor k_buffer, Tensor v_buffer, float k_scale, float v_scale, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, "
        "int? max_len_extend, float sm_scale, float? logit_cap, bool is_cross_attn, int sliding_window_size, "
        "Tensor? encoder_lens, Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()",
        extend_attention_cpu,
    ),
    CpuOp(
        "decode_attention_cpu(Tensor query, Tensor(b!) k_buffer, Tensor(c!) v_buffer, float k_scale, float v_scale, "
        "Tensor(a!) output, Tensor? key, Tensor? value, Tensor? loc, Tensor attn_logits, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float? logit_cap, bool is_cross_attn, "
        "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()",
        decode_attention_cpu,
    ),
    CpuOp(
        "assign_req_to_token_pool_cpu(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, "
        "Tensor end_offset, Tensor out_cache_loc, int pool_len) -> ()",
        assign_req_to_token_pool_cpu,
    ),
    CpuOp(
        "reconstruct_indices_from_tree_mask_cpu(Tensor tree_mask, Tensor verified_seq_len, Tensor(a!) positions, "
        "Tensor(b!) retrive_index, Tensor(c!) retrive_next_token, Tensor(d!) retrive_next_sibling, int batch_size, "
        "int draft_token_num) -> ()",
        reconstruct_indices_from_tree_mask_cpu,
    ),
    CpuOp(
        "assign_extend_cache_locs_cpu(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, "
        "Tensor end_offset, Tensor(a!) out_cache_loc, int pool_len) -> ()",
        assign_extend_cache_locs_cpu,
    ),
    CpuOp(
        "verify_tree_greedy_cpu(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, "
        "Tensor candidates, Tensor retrive_index, Tensor retrive_next_token, Tensor retrive_next_sibling, "
        "Tensor target_predict) -> ()",
        verify_tree_greedy_cpu,
    ),
    CpuOp(
        "fill_accept_out_cache_loc_cpu(Tensor accept_index, Tensor out_cache_loc, Tensor(a!) accept_out_cache_loc) "
        "-> ()",
        fill_accept_out_cache_loc_cpu,
    ),
    CpuOp(
        "assign_draft_cache_locs_contiguous_cpu(Tensor req_pool_indices, Tensor req_to_token, Tensor seq_lens, "
        "Tensor(a!) out_cache_loc, int pool_len, int topk, int num_steps) -> ()",
        assign_draft_cache_locs_contiguous_cpu,
    ),
    CpuOp(
        "build_draft_decode_metadata_cpu(Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, int topk, "
        "int num_steps, int pool_len) -> Tensor",
        build_draft_decode_metadata_cpu,
    ),
    CpuOp(
        "build_tree_kernel_efficient_cpu(Tensor parent_list, Tensor selected_index, Tensor verified_seq_len, "
        "Tensor(a!) tree_mask, Tensor(b!) positions, Tensor(c!) retrive_index, Tensor(d!) retrive_next_token, "
        "Tensor(e!) retrive_next_sibling, int topk, int depth, int draft_token_num, int tree_mask_mode) -> ()",
        build_tree_kernel_efficient_cpu,
    ),
    CpuOp(
        "fill_bonus_tokens_cpu(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, int accept_stride) "
        "-> ()",
        fill_bonus_tokens_cpu,
    ),
    CpuOp(
        "rotate_input_ids_cpu(Tensor(a!) input_ids, Tensor extend_start_loc, Tensor extend_seq_lens, "
        "Tensor topk_index, Tensor? select_index) -> ()",
        rotate_input_ids_cpu,
    ),
    CpuOp(
        "tree_speculative_sampling_target_only_cpu(Tensor(a!) predicts, Tensor(b!) accept_index, "
        "Tensor(c!) accept_token_num, Tensor candidates, Tensor retrive_index, Tensor retrive_next_token, "
        "Tensor retrive_next_sibling, Tensor uniform_samples, Tensor uniform_samples_for_final_sampling, "
        "Tensor target_probs, Tensor(d!) draft_probs, float threshold_single, float threshold_acc, "
        "bool deterministic) -> ()",
        tree_speculative_sampling_target_only_cpu,
    ),
    CpuOp("murmur_hash32_cpu(Tensor seed, Tensor positions, Tensor col_indices) -> Tensor", murmur_hash32_cpu),
)

# torch.library drops a Library's registrations when the object is garbage-collected, so the Library of each
# namespace must outlive the call that created it; keyed by namespace so a second call extends the same fragment.
_LIBRARIES: dict[str, torch.library.Library] = {}


def _fake(op: CpuOp) -> Callable[..., object]:
    if op.name == "build_draft_decode_metadata_cpu":
        return _fake_draft_decode_metadata
    if op.name == "murmur_hash32_cpu":
        return lambda seed, positions, cols: seed.new_empty((seed.shape[0], cols.shape[0]), dtype=torch.uint32)
    return lambda *args, **kwargs: None


# The attention ops' implementations by `attention` setting (OPS holds the batched torch-op versions).
ATTENTION = {
    "fused": {"extend_attention_cpu": extend_attention_fused, "decode_attention_cpu": decode_attention_fused},
    "batched": {},
    "loop": {"extend_attention_cpu": extend_attention_loop, "decode_attention_cpu": decode_attention_loop},
}


def register_sgl_kernel_cpu_ops(namespace: str = "sgl_kernel", attention: str = "fused") -> list[str]:
    """Define and implement every op of OPS under torch.ops.<namespace>; returns the names registered.

    `attention`: "fused" (torch's fused attention kernel, one call per layer), "batched" (torch ops over the step's
    requests padded together) or "loop" (request by request, the reference). An op that already exists there (a
    real sgl_kernel build, or an earlier call) is left alone.
    """
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {tuple(ATTENTION)}, got {attention!r}")
    existing = getattr(torch.ops, namespace)
    missing = [op for op in OPS if not hasattr(existing, op.name)]
    if not missing:
        return []
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    library = _LIBRARIES[namespace]
    for op in missing:
        library.define(op.schema)
        impl = ATTENTION[attention].get(op.name, op.impl)
        library.impl(op.name, impl, "CPU")
        # A fake (meta) kernel lets torch.compile trace through graphs that call the op.
        torch.library.register_fake(f"{namespace}::{op.name}", _fake(op), lib=library)
    return [op.name for op in missing]
