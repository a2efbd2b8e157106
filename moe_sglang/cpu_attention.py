"""SGLang's CPU attention backend (`intel_amx`) taught to read a ragged verify layout.

SGLang's TARGET_VERIFY path on CPU assumes every request verifies the same `draft_token_num` tokens
(intel_amx_backend.py `_build_extend_metadata`: uniform extend lengths, start offsets `arange(0, bs * n, n)`,
`seq_lens + n`). When the step's verify input carries a `RaggedVerifyLayout` (moe_sglang/ragged.py), this subclass
takes the extend lengths and start offsets from it instead, exactly as SGLang's FlashInfer / FA3 / TRT-LLM backends
read the same layout on GPU. The torch extend-attention op behind it (service/kernels/attention_cpu.py) already takes
per-request extend lengths and a per-request (L_i x L_i) tree mask. Without a layout nothing changes.

It is registered under SGLang's own name `intel_amx` (`register_attention_backend` is a dict write), so the CLI
choice, SGLang's argument post-processing and the draft-backend factory keep working as they do.
"""

from __future__ import annotations

BACKEND_NAME = "intel_amx"


def backend_class():
    from sglang.srt.layers.attention.intel_amx_backend import IntelAMXAttnBackend
    from sglang.srt.speculative.ragged_verify import resolve_ragged_verify_layout

    class RaggedIntelAMXAttnBackend(IntelAMXAttnBackend):
        def init_forward_metadata(self, forward_batch) -> None:
            super().init_forward_metadata(forward_batch)
            layout = _verify_layout(forward_batch, resolve_ragged_verify_layout)
            if layout is not None:
                attn_logits, _ = self.forward_metadata
                self.forward_metadata = (attn_logits, max(layout.verify_lens_cpu))

        def _build_extend_metadata(self, forward_batch):
            layout = _verify_layout(forward_batch, resolve_ragged_verify_layout)
            if layout is None:
                return super()._build_extend_metadata(forward_batch)
            spec_info = forward_batch.spec_info
            verify_lens = layout.verify_lens  # [bs] int32
            seq_lens = forward_batch.seq_lens + verify_lens
            # the chain case (tree_topk == 1) is plain causal attention inside the block, as in SGLang's method
            tree_mask = spec_info.custom_mask if spec_info.tree_topk != 1 else None
            return seq_lens, verify_lens, layout.extend_start_loc, tree_mask

    return RaggedIntelAMXAttnBackend


def _verify_layout(forward_batch, resolve):
    if not forward_batch.forward_mode.is_target_verify():
        return None
    return resolve(forward_batch)


def register() -> None:
    """Make `--attention-backend intel_amx` build the ragged-aware subclass (in every process that builds models)."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    cls = backend_class()
    ATTENTION_BACKENDS[BACKEND_NAME] = lambda runner: cls(runner)
