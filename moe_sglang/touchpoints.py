"""The inventory: every SGLang name moe-serve registers with, subclasses, calls, hooks, writes or reads, in one place,
checked against the installed SGLang when the plugin loads.

A callable's check compares `inspect.signature` with the one recorded here (the signature moe-serve was written
against, SGLang 0.5.23), parameter names, kinds and defaults, without type annotations (their spelling changes with
`from __future__ import annotations` where the API does not); an instance attribute of a class we subclass is checked in the class's source (`self.<name>`
is assigned there); a module attribute we write must exist. Any difference stops the engine at start with a message
naming the touchpoint (SystemExit: SGLang swallows plugin exceptions but not that). `python -m moe_sglang.touchpoints`
prints the check against the installed SGLang, for upgrading.

Hooks (`use="hook"`) remain only where SGLang has no mechanism; each says why.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass

SGLANG_VERSION = "0.5.23"
USES = ("register", "subclass", "override", "call", "hook", "write", "attribute")


@dataclass(frozen=True)
class Touchpoint:
    target: str  # dotted path in sglang (module.attr or module.Class.attr)
    use: str  # one of USES
    why: str  # what moe-serve needs it for
    signature: str | None = None  # inspect.signature as recorded; None = existence (or source assignment) only


_SPEC = "sglang.srt.speculative"
_AMX = "sglang.srt.layers.attention.intel_amx_backend.IntelAMXAttnBackend"
_NGRAM = f"{_SPEC}.ngram_worker.NGRAMWorker"
_STANDALONE = f"{_SPEC}.standalone_worker_v2.StandaloneWorkerV2"

TOUCHPOINTS: tuple[Touchpoint, ...] = (
    # --- registration mechanisms
    Touchpoint(
        f"{_SPEC}.spec_info.SpeculativeAlgorithm.register",
        "register",
        "MOE_SERVE_NGRAM / MOE_SERVE_STANDALONE (algorithm.py)",
        "(name, *, supports_overlap=False, validate_server_args=None, "
        "spec_class=<class 'sglang.srt.speculative.spec_registry.CustomSpecAlgo'>)",
    ),
    Touchpoint(f"{_SPEC}.spec_registry.get_spec", "call", "register once per process", "(name)"),
    Touchpoint(
        f"{_SPEC}.spec_registry.CustomSpecAlgo",
        "subclass",
        "describes our algorithms to SGLang",
        "(name, factory, *, supports_overlap=False, validate_server_args=None)",
    ),
    Touchpoint(
        f"{_SPEC}.spec_info.SpeculativeAlgorithm.create_future_map",
        "call",
        "a method SGLang calls on every algorithm that CustomSpecAlgo lacks",
        "(self, device, req_to_token_pool, needs_cpu_seq_lens=True, needs_confidence_relay=False)",
    ),
    *(
        Touchpoint(
            f"{_SPEC}.spec_info.SpeculativeAlgorithm.{name}",
            "call",
            "a method SGLang calls on every algorithm that CustomSpecAlgo lacks",
            "(self)",
        )
        for name in ("carries_draft_hidden_states", "need_topk", "get_platform_worker_cls")
    ),
    Touchpoint(
        f"{_SPEC}.spec_info.SpeculativeAlgorithm.get_num_tokens_per_req_for_target_verify",
        "call",
        "verify width per request, answered as the builtin does",
        "(self, num_draft_tokens, is_draft_worker)",
    ),
    Touchpoint(
        "sglang.srt.layers.attention.attention_registry.ATTENTION_BACKENDS",
        "write",
        "intel_amx -> the ragged-verify-aware subclass (cpu_attention.py)",
    ),
    Touchpoint(
        "sglang.srt.plugins.hook_registry.HookRegistry.register",
        "call",
        "the hooks below",
        "(target, hook, hook_type=<HookType.AFTER: 'after'>, *, source=None)",
    ),
    Touchpoint(
        "sglang.srt.runtime_context.override_platform", "call", "keep the intel_amx backend on CPU", "(**facts)"
    ),
    # --- the NGRAM worker we subclass: what our step overrides, calls and reads
    Touchpoint(
        f"{_NGRAM}.__init__",
        "override",
        "our worker's constructor",
        "(self, server_args, gpu_id, nccl_port, target_worker)",
    ),
    Touchpoint(
        f"{_NGRAM}.forward_batch_generation",
        "override",
        "the decode step is ours (ngram_worker.py)",
        "(self, batch, on_publish=None, pp_proxy_tensors=None)",
    ),
    Touchpoint(
        f"{_NGRAM}.clear_cache_pool",
        "override",
        "drop the held-back corpus windows with the corpus (ngram_worker.CorpusFeed)",
        "(self)",
    ),
    *(
        Touchpoint(f"{_NGRAM}.{name}", "attribute", "read by our step")
        for name in (
            "draft_token_num",
            "max_trie_depth",
            "ngram_corpus",
            "positions_batch",
            "retrieve_indexes_batch",
            "retrieve_next_token_batch",
            "retrieve_next_sibling_batch",
            "_prev_decode_rids",
            "speculative_num_draft_tokens",
            "device",
            "model_runner",
            "token_to_kv_pool_allocator",
        )
    ),
    Touchpoint(
        f"{_SPEC}.cpp_ngram.ngram_corpus.NgramCorpus.batch_get",
        "call",
        "NGRAM's trie lookup, for the requests that may get drafts",
        "(self, req_ids, batch_tokens, total_lens)",
    ),
    Touchpoint(f"{_SPEC}.cpp_ngram.ngram_corpus.NgramCorpus.synchronize", "call", "before a lookup", "(self)"),
    Touchpoint(
        f"{_SPEC}.cpp_ngram.ngram_corpus.NgramCorpus.batch_put",
        "call",
        "feed the trie: the windows of NGRAMWorker._update_ngram_corpus, several steps in one call (CorpusFeed)",
        "(self, batch_tokens)",
    ),
    Touchpoint(
        f"{_SPEC}.cpp_ngram.ngram_corpus.NgramCorpus.erase_match_state",
        "call",
        "forget requests that left the batch",
        "(self, req_ids)",
    ),
    Touchpoint(
        f"{_SPEC}.ngram_info.NgramVerifyInput",
        "call",
        "the verify input, dense (acceptance) and compact (forward)",
        "(draft_token=None, custom_mask=None, positions=None, retrieve_index=None, retrieve_next_token=None, "
        "retrieve_next_sibling=None, draft_token_num=None, future_indices=None, new_seq_lens=None, "
        "accept_tokens=None, accept_lens=None)",
    ),
    Touchpoint(
        f"{_SPEC}.ngram_worker._derive_tree_links",
        "call",
        "grammar masks over the draft tree",
        "(mask, bs, draft_token_num)",
    ),
    Touchpoint(
        f"{_SPEC}.ngram_worker.eagle_sample",
        "call",
        "SGLang's acceptance on the dense rows",
        "(verify_input, batch, logits_output, grammar_mask=None, uno_target_max_top_k=None, *, watermark_state=None, "
        "watermark_full_mask=True)",
    ),
    Touchpoint(
        f"{_SPEC}.spec_utils.move_accept_tokens_to_target_kvcache",
        "call",
        "KV of the accepted tokens (not called where they head their verify windows: accept.kv_in_place)",
        "(batch, accept_index, num_correct_drafts, token_to_kv_pool_allocator)",
    ),
    Touchpoint(
        f"{_SPEC}.spec_utils.GrammarTree.from_host",
        "call",
        "grammar masks over the draft tree",
        "(retrieve_next_token, retrieve_next_sibling, draft_token)",
    ),
    Touchpoint(
        f"{_SPEC}.spec_utils.build_grammar_vocab_mask",
        "call",
        "grammar masks over the draft tree",
        "(*, reqs, tree, sampling_info, device, barrier)",
    ),
    Touchpoint(
        "sglang.srt.layers.logprob_processor.compute_spec_logprobs",
        "call",
        "logprobs of the accepted tokens",
        "(batch, logits_output, predict, *, accept_index=None, chain_stride=None)",
    ),
    Touchpoint(
        "sglang.kernels.ops.speculative.cache_locs.assign_extend_cache_locs_func",
        "call",
        "the KV slots the scheduler reserved for this step's tokens",
        "(req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device)",
    ),
    Touchpoint(
        "sglang.kernels.ops.speculative.reconstruct_tree.reconstruct_indices_from_tree_mask_func",
        "call",
        "positions and tree links of the dense draft (a GPU engine's; a CPU engine's from its host trees)",
        "(tree_mask, verified_seq_len, positions, retrieve_index, retrieve_next_token, retrieve_next_sibling, "
        "batch_size, draft_token_num)",
    ),
    # a dataclass we build by keyword: its field list grows between releases, so existence only; a renamed field
    # fails at the first decode step
    Touchpoint("sglang.srt.managers.scheduler.GenerationBatchResult", "call", "the step's result"),
    Touchpoint(
        "sglang.srt.managers.scheduler.GenerationBatchResult.num_non_draft_tokens_per_req",
        "write",
        "a plain burst's tokens are none of them drafts (plain_burst.py)",
    ),
    # what bounds a plain burst (plain_burst.py): the slots reserved for the step, sampling without per-token state
    *(
        Touchpoint(f"sglang.srt.{owner}.{name}", "attribute", "what bounds a plain burst")
        for owner, names in (
            ("managers.schedule_batch.ReqKvInfo", ("kv_allocated_len", "kv_committed_len")),
            ("managers.schedule_batch.Req", ("kv", "return_hidden_states", "return_sampling_mask")),
            (
                "sampling.sampling_batch_info.SamplingBatchInfo",
                ("penalizer_orchestrator", "has_custom_logit_processor"),
            ),
        )
        for name in names
    ),
    Touchpoint(
        f"{_SPEC}.ragged_verify.RaggedVerifyLayout.from_verify_lens",
        "call",
        "per-request verify lengths, as SGLang's backends read them",
        "(*, verify_lens_cpu, device, grid, graph_num_tokens_floor=0)",
    ),
    Touchpoint(f"{_SPEC}.spec_info.SpecInput.ragged_verify_layout", "write", "carried by the compact verify input"),
    Touchpoint(
        f"{_SPEC}.ragged_verify.resolve_ragged_verify_layout",
        "call",
        "read by our CPU attention backend",
        "(forward_batch)",
    ),
    Touchpoint(
        "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation",
        "call",
        "target verify and plain decode forwards",
        "(self, batch, forward_batch=None, pp_proxy_tensors=None, is_verify=False, skip_attn_backend_init=None, *, "
        "capture_hidden_mode=None, return_kv_loc_plan=False)",
    ),
    # --- the STANDALONE worker we subclass (SGLang loads and sizes the draft model), and the draft model we drive
    Touchpoint(
        f"{_STANDALONE}.__init__",
        "override",
        "our worker's constructor",
        "(self, server_args, gpu_id, nccl_port, target_worker)",
    ),
    Touchpoint(
        f"{_SPEC}.eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation",
        "override",
        "the prefill and decode steps are ours (standalone_worker.py)",
        "(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None)",
    ),
    Touchpoint(
        f"{_SPEC}.base_spec_worker.BaseSpecWorker.init_attention_backends",
        "override",
        "after SGLang's: the draft model's backend reads ragged layouts",
        "(self)",
    ),
    *(
        Touchpoint(f"{_STANDALONE}.{name}", "attribute", "read by our step")
        for name in ("_draft_worker", "topk", "speculative_num_steps", "speculative_num_draft_tokens", "device")
    ),
    Touchpoint(f"{_SPEC}.base_spec_worker.BaseSpecWorker.token_to_kv_pool_allocator", "attribute", "KV move"),
    Touchpoint(f"{_SPEC}.standalone_worker_v2.StandaloneDraftWorker.draft_worker", "attribute", "the draft model"),
    Touchpoint(
        "sglang.srt.server_args.ServerArgs.speculative_draft_model_path",
        "attribute",
        "the draft's checkpoint, where its acceptance head lies (standalone_worker._accept_head)",
    ),
    Touchpoint(f"{_SPEC}.standalone_worker_v2.StandaloneDraftWorker.draft_runner", "attribute", "its ModelRunner"),
    Touchpoint("sglang.srt.model_executor.model_runner.ModelRunner.model", "attribute", "the draft model itself"),
    Touchpoint(
        "sglang.srt.layers.logits_processor.LogitsProcessor.forward",
        "call",
        "the draft model's logits over the rows a draft forward needs (draft_model.SelectedLogits wraps the "
        "model's `logits_processor`: SGLang selects rows only in DRAFT_EXTEND_V2 mode, ours are TARGET_VERIFY)",
        "(self, input_ids, hidden_states, lm_head, logits_metadata, aux_hidden_states=None, "
        "hidden_states_before_norm=None)",
    ),
    Touchpoint(
        "sglang.srt.models.llama.LlamaForCausalLM.logits_processor",
        "write",
        "replaced by SelectedLogits around it on the draft model's instance (any model class holding SGLang's "
        "LogitsProcessor there; the bundled drafts are Llama)",
    ),
    Touchpoint(
        "sglang.srt.layers.logits_processor.LogitsMetadata.from_forward_batch",
        "call",
        "the metadata SelectedLogits narrows",
        "(forward_batch)",
    ),
    Touchpoint(
        "sglang.srt.layers.logits_processor.LogitsMetadata.draft_extend_select_index",
        "write",
        "the rows whose logits a draft forward needs (SelectedLogits)",
    ),
    Touchpoint(
        "sglang.srt.model_executor.model_runner.ModelRunner.attn_backend",
        "write",
        "the draft runner's backend: SGLang builds it directly, not through the registry (standalone_worker.py)",
    ),
    # --- the dense draft model's direct forward (draft_forward.py) reads its weights, shape and KV pool
    Touchpoint("sglang.srt.model_executor.model_runner.ModelRunner.token_to_kv_pool", "attribute", "the draft's KV"),
    Touchpoint("sglang.srt.model_executor.model_runner.ModelRunner.device", "attribute", "CPU only"),
    *(
        Touchpoint(
            f"sglang.srt.mem_cache.memory_pool.MHATokenToKVPool.{name}",
            "call",
            "the draft's K/V buffers",
            "(self, layer_id)",
        )
        for name in ("get_key_buffer", "get_value_buffer")
    ),
    *(
        Touchpoint(
            f"sglang.srt.mem_cache.memory_pool.{owner}.{name}", "attribute", "a plain float32 pool of 1-token pages"
        )
        for owner, name in (("KVCache", "dtype"), ("KVCache", "store_dtype"), ("KVCache", "page_size"))
    ),
    Touchpoint(
        "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod", "attribute", "unquantized projections only"
    ),
    *(
        Touchpoint(f"sglang.srt.models.llama.{owner}.{name}", "attribute", "the draft's weights and shape")
        for owner, names in (
            ("LlamaForCausalLM", ("model", "lm_head", "config")),
            ("LlamaModel", ("embed_tokens", "layers", "norm")),
            ("LlamaDecoderLayer", ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")),
            ("LlamaAttention", ("qkv_proj", "o_proj", "rotary_emb", "attn", "num_heads", "num_kv_heads", "head_dim")),
            ("LlamaMLP", ("gate_up_proj", "down_proj", "act_fn")),
        )
        for name in names
    ),
    *(
        Touchpoint(f"sglang.srt.layers.{owner}.{name}", "attribute", "the draft's weights and shape")
        for owner, name in (
            ("layernorm.RMSNorm", "weight"),
            ("layernorm.RMSNorm", "variance_epsilon"),
            ("linear.LinearBase", "quant_method"),
            ("rotary_embedding.base.RotaryEmbedding", "cos_sin_cache"),
            ("rotary_embedding.base.RotaryEmbedding", "is_neox_style"),
            ("rotary_embedding.base.RotaryEmbedding", "rotary_dim"),
            ("rotary_embedding.base.RotaryEmbedding", "head_size"),
            ("radix_attention.RadixAttention", "layer_id"),
            ("radix_attention.RadixAttention", "logit_cap"),
            ("radix_attention.RadixAttention", "sliding_window_size"),
        )
    ),
    # --- the target model's direct decode forward (target_forward.py): registered for its architecture, reads its
    # weights, modules and the decode batch
    Touchpoint(
        "sglang.srt.models.registry.ModelRegistry",
        "write",
        "models['MixtralForCausalLM'] = SGLang's class subclassed (the registry a plugin may extend)",
    ),
    Touchpoint(
        "sglang.srt.models.mixtral.MixtralForCausalLM",
        "subclass",
        "its decode forwards run directly",
    ),
    Touchpoint(
        "sglang.srt.models.mixtral.MixtralForCausalLM.forward",
        "override",
        "decode and ragged verify forwards run directly, the rest by SGLang's",
        "(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None)",
    ),
    *(
        Touchpoint(f"sglang.srt.models.mixtral.{owner}.{name}", "attribute", "the target's weights, modules and shape")
        for owner, names in (
            ("MixtralForCausalLM", ("model", "lm_head", "config", "logits_processor", "pp_group", "quant_config")),
            ("MixtralModel", ("embed_tokens", "layers", "norm")),
            ("MixtralDecoderLayer", ("self_attn", "block_sparse_moe", "input_layernorm", "post_attention_layernorm")),
            (
                "MixtralAttention",
                ("qkv_proj", "o_proj", "rotary_emb", "attn", "num_heads", "num_kv_heads", "head_dim"),
            ),
            ("MixtralMoE", ("gate", "topk", "experts", "tp_size")),
        )
        for name in names
    ),
    Touchpoint(
        "sglang.srt.layers.moe.topk.TopK.forward",
        "call",
        "the layer's routing (its TopK module, with the expert-budget hook): (hidden_states, router_logits)",
        "(self, *args, backend=None, **kwargs)",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.fused_moe_triton.layer.FusedMoE.forward",
        "call",
        "the layer's experts (the engine's MoE forward, cpu_moe.py)",
        "(self, hidden_states, topk_output, pre_quant_input=None)",
    ),
    *(
        Touchpoint(f"sglang.srt.layers.{owner}.{name}", "attribute", "a plain unquantized model")
        for owner, name in (
            ("moe.fused_moe_triton.layer.FusedMoE", "quant_method"),
            ("quantization.unquant.UnquantizedFusedMoEMethod", "apply"),
            ("layernorm.RMSNorm", "variance_size_override"),
            ("logits_processor.LogitsProcessor", "logit_scale"),
            ("logits_processor.LogitsProcessor", "final_logit_softcapping"),
        )
    ),
    # --- the direct forward's MoE sublayers without the modules' dispatch (inline_moe.py)
    Touchpoint(
        "sglang.srt.layers.moe.topk.fused_topk_native",
        "call",
        "the routing arithmetic select_experts calls under TopK.forward_native",
        "(hidden_states, gating_output, topk, renormalize, correction_bias=None, scoring_func='softmax')",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.topk.fused_topk_torch_native",
        "call",
        "the routing arithmetic the decode MoE op reproduces (taken only where fused_topk_native is this function)",
        "(hidden_states, gating_output, topk, renormalize, correction_bias=None, scoring_func='softmax')",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.topk._RENORMALIZE_SUM_EPSILON",
        "attribute",
        "the epsilon fused_topk_torch_native adds to the kept weights' sum (the decode MoE op adds the same)",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.topk.build_precomputed_topk_output",
        "call",
        "SGLang's post-processing for routers that compute (weights, ids) themselves: capture + recorder (also after "
        "the decode MoE op)",
        "(topk_weights, topk_ids, topk_config, layer_id)",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.topk.resolve_routing_inputs",
        "call",
        "a forward's padded-token count and EPLB placement (inline only without either)",
        "(*, layer_id, is_draft, num_token_non_padded=None, expert_location_dispatch_info=None)",
    ),
    Touchpoint(
        "sglang.kernels.fused_op.BaseFusedOp._resolve_forward_method",
        "call",
        "which forward SGLang dispatches a TopK / MoE method to (inline only where it is the CPU one)",
        "(self)",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.utils.should_use_flashinfer_cutlass_moe_fp4_allgather",
        "call",
        "the standard dispatcher's one non-trivial dispatch",
        "()",
    ),
    Touchpoint("sglang.srt.utils.use_intel_amx_backend", "call", "AMX-packed experts take another kernel", "(layer)"),
    *(
        Touchpoint(
            f"sglang.srt.layers.quantization.unquant.UnquantizedFusedMoEMethod.{name}",
            "write",
            "the expert weights this method registers on a FusedMoE layer: read by the engine's MoE forward, their data "
            "narrowed to bfloat16 where every value is one (cpu_moe._store)",
        )
        for name in ("w13_weight", "w2_weight")
    ),
    Touchpoint(
        "sglang.srt.environ.Envs.SGLANG_EAGER_INPUT_NO_COPY",
        "attribute",
        "set on the CPU engine (launch.server_env): the eager runner's input copy serves CUDA graphs only",
    ),
    *(
        Touchpoint(f"sglang.srt.environ.Envs.{name}", "attribute", "routing simulation replaces the router's choice")
        for name in ("SGLANG_SIMULATE_UNIFORM_EXPERTS", "SGLANG_SIMULATE_ROUND_ROBIN_EXPERTS")
    ),
    *(
        Touchpoint(f"sglang.srt.layers.{owner}.{name}", "attribute", "inline MoE: what the modules would do")
        for owner, names in (
            (
                "moe.topk.TopK",
                ("topk_config", "is_draft", "layer_id", "enable_waterfill", "waterfill_balancer"),
            ),
            (
                "moe.topk.TopKConfig",
                (
                    "top_k",
                    "renormalize",
                    "use_grouped_topk",
                    "custom_routing_function",
                    "correction_bias",
                    "scoring_func",
                    "num_shared_topk_slots",
                    "apply_routed_scaling_factor_on_output",
                    "routed_scaling_factor",
                ),
            ),
            ("moe.fused_moe_triton.layer.FusedMoE", ("dispatcher", "moe_ep_size", "_dwdp_bound", "_use_ascend_fuseep")),
            ("quantization.unquant.UnquantizedFusedMoEMethod", ("forward_cpu", "moe_runner_config")),
            ("moe.token_dispatcher.standard.StandardDispatcher", ("local_expert_mapping",)),
        )
        for name in names
    ),  # fmt: skip
    *(
        Touchpoint(f"sglang.srt.model_executor.forward_batch_info.ForwardBatch.{name}", "attribute", "the decode batch")
        for name in (
            "forward_mode",
            "capture_hidden_mode",
            "lora_ids",
            "out_cache_loc",
            "req_pool_indices",
            "seq_lens",
            "seq_lens_cpu",
        )
    ),
    Touchpoint("sglang.srt.model_executor.forward_batch_info.CaptureHiddenMode.NULL", "attribute", "no hidden states"),
    *(
        Touchpoint(f"{_SPEC}.ragged_verify.RaggedVerifyLayout.{name}", "attribute", "a direct verify's lengths")
        for name in ("verify_lens", "extend_start_loc")
    ),
    *(
        Touchpoint(f"{_SPEC}.ngram_info.NgramVerifyInput.{name}", "attribute", "a direct verify's tree mask")
        for name in ("custom_mask", "tree_topk")
    ),
    Touchpoint("sglang.srt.model_executor.forward_batch_info.ForwardBatch.spec_info", "attribute", "the verify input"),
    Touchpoint("sglang.srt.model_executor.forward_batch_info.ForwardBatch.positions", "attribute", "token positions"),
    Touchpoint("sglang.srt.mem_cache.memory_pool.ReqToTokenPool.req_to_token", "attribute", "each request's slots"),
    Touchpoint(
        "sglang.srt.layers.logits_processor.LogitsProcessorOutput",
        "call",
        "the decode forward's result: next_token_logits alone",
    ),
    Touchpoint("sglang.srt.model_executor.forward_context.get_attn_backend", "call", "the forward's backend", "()"),
    *(
        Touchpoint(f"{_AMX}.{name}", "attribute", "the decode's pools, the target's own (not a draft step's)")
        for name in ("token_to_kv_pool", "req_to_token_pool", "draft_decode_metadata", "use_sliding_window_kv_pool")
    ),
    # --- the CPU attention backend we subclass
    Touchpoint(f"{_AMX}._build_extend_metadata", "override", "ragged extend lengths on CPU", "(self, forward_batch)"),
    Touchpoint(f"{_AMX}.init_forward_metadata", "override", "ragged max extend length on CPU", "(self, forward_batch)"),
    Touchpoint(f"{_AMX}.forward_metadata", "attribute", "(attn_logits, max_extend_len) of the forward"),
    # --- hooks: no mechanism exists for these
    Touchpoint(
        "sglang.srt.managers.scheduler.Scheduler.ingest_requests",
        "hook",
        "an idle scheduler receives a burst's requests together (arrival_gather.py): no mechanism waits on arrivals "
        "without the overlap scheduler (PrefillDelayer requires it)",
        "(self, stop_at_pause=False)",
    ),
    Touchpoint("sglang.srt.managers.scheduler.Scheduler.waiting_queue", "attribute", "idle: nothing queued"),
    Touchpoint("sglang.srt.managers.scheduler.Scheduler.running_batch", "attribute", "idle: nothing running"),
    Touchpoint("sglang.srt.managers.scheduler.Scheduler.chunked_req", "attribute", "idle: no prefill in chunks"),
    Touchpoint("sglang.srt.managers.scheduler.Scheduler.last_batch", "attribute", "idle: nothing just prefilled"),
    Touchpoint(
        "sglang.srt.managers.scheduler.Scheduler._deferred_input_requests", "attribute", "idle: no input held back"
    ),
    Touchpoint("sglang.srt.managers.schedule_batch.ScheduleBatch.is_empty", "call", "idle: nothing running", "(self)"),
    Touchpoint("sglang.srt.managers.schedule_batch.ScheduleBatch.reqs", "attribute", "idle: its requests finished"),
    Touchpoint(
        "sglang.srt.managers.schedule_batch.ScheduleBatch.forward_mode", "attribute", "bursts: the last step a prefill"
    ),
    Touchpoint("sglang.srt.model_executor.forward_batch_info.ForwardMode.EXTEND", "attribute", "bursts: a prefill"),
    Touchpoint(
        "sglang.srt.managers.scheduler.Scheduler.recv_from_tokenizer", "attribute", "plain bursts: arrivals pending"
    ),
    Touchpoint("sglang.srt.managers.io_struct.TokenizedGenerateReqInput", "attribute", "a generation request"),
    Touchpoint("sglang.srt.managers.io_struct.BatchTokenizedGenerateReqInput", "attribute", "a batch of them"),
    Touchpoint(
        "sglang.srt.layers.moe.topk.TopK.forward_native",
        "hook",
        "expert budget + expert counting in verify: SGLang has no extension point between router and MoE kernel "
        "(inline_moe.py also compares a TopK's dispatch with it and applies the same scope)",
        "(self, hidden_states, router_logits, *, num_token_non_padded=None, expert_location_dispatch_info=None, "
        "dynamic_expert_bias=None, router_logits_partials=None)",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.topk.TopK.forward_cpu",
        "hook",
        "as forward_native (CPU with AMX)",
        "(self, hidden_states, router_logits, *, num_token_non_padded=None, expert_location_dispatch_info=None, "
        "dynamic_expert_bias=None)",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.topk.TopK.forward_cuda",
        "hook",
        "as forward_native (GPU)",
        "(self, hidden_states, router_logits, *, num_token_non_padded=None, expert_location_dispatch_info=None, "
        "dynamic_expert_bias=None, router_logits_partials=None)",
    ),
    Touchpoint(
        "sglang.srt.layers.moe.fused_moe_native.moe_forward_native",
        "hook",
        "the CPU MoE forward with tuned expert products (cpu_moe.py): SGLang has no registry for the CPU MoE kernel; "
        "forward_cpu imports this function at each call (inline_moe.py calls it the same way)",
        "(layer, x, topk_output, moe_runner_config)",
    ),
    Touchpoint(
        "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply",
        "hook",
        "dense products at a step's few rows in the planned form (cpu_dense.py): the method picks its product by "
        "platform flags inside; no registry selects a CPU linear kernel",
        "(self, layer, x, bias=None)",
    ),
    Touchpoint(
        "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head",
        "hook",
        "the lm_head's product at a step's few rows in the planned form (cpu_dense.py): the method calls torch.matmul "
        "itself",
        "(self, hidden_states, lm_head, embedding_bias=None, *, out=None)",
    ),
    *(
        Touchpoint(
            f"sglang.srt.layers.logits_processor.LogitsProcessor.{name}",
            "attribute",
            "cpu_dense, target_forward: a plain LM head",
        )
        for name in ("use_fp32_lm_head", "rl_on_policy_target")
    ),
    Touchpoint(
        "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding.forward_native",
        "hook",
        "NeoX rope with per-step tables on CPU (cpu_rope.py): without AMX weight packing the op's dispatch ends here; "
        "its CPU kernel branch needs cpu_has_amx_support() and its forward registry serves out-of-tree platforms only",
        "(self, positions, query, key, offsets=None, fused_set_kv_buffer_arg=None)",
    ),
    Touchpoint(
        "sglang.srt.models.qwen2_moe.fused_gate_sigmoid_mul",
        "hook",
        "a Triton-only kernel with no CPU branch: its torch version on CPU",
        "(hidden_states, gate_weight, shared_output)",
    ),
    Touchpoint(
        "sglang.srt.models.qwen2_moe.fused_gate_sigmoid_mul_add",
        "hook",
        "as fused_gate_sigmoid_mul",
        "(hidden_states, gate_weight, shared_output, final_hidden_states)",
    ),
    Touchpoint(
        f"{_SPEC}.eagle_utils._verify_uses_greedy",
        "hook",
        "SGLang verifies greedily on CPU whatever the request asks (no sampling kernel there): the same predicate "
        "without the CPU clause (sampled_verify.py); a function, not a registry, decides it",
        "(*, is_all_greedy, is_cpu, is_hip, is_xpu, use_rejection_sampling)",
    ),
    Touchpoint(
        f"{_SPEC}.eagle_utils.tree_speculative_sampling_target_only",
        "write",
        "None on CPU (CUDA-only kernel): our torch version (sampled_verify.py)",
    ),
    Touchpoint(f"{_SPEC}.eagle_utils.top_k_renorm_prob", "write", "None on CPU: our torch version"),
    Touchpoint(f"{_SPEC}.eagle_utils.top_p_renorm_prob", "write", "None on CPU: our torch version"),
    # --- per-request speculation summaries in responses (stats_output.py)
    Touchpoint(
        "sglang.srt.managers.scheduler.Scheduler.get_output_streamer_class",
        "hook",
        "selects our output-streamer subclass: SGLang's extension point for per-request response fields is a "
        "subclass, and this method is where the scheduler picks its class",
        "(self)",
    ),
    Touchpoint(
        "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer",
        "subclass",
        "emits a request's summary once, when it finishes",
    ),
    Touchpoint(
        "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer"
        ".build_additional_customized_info",
        "override",
        "per-request fields SGLang carries to meta_info",
        "(self, reqs)",
    ),
    Touchpoint(
        "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer"
        ".has_additional_customized_info",
        "override",
        "turns the fields above on",
    ),
    Touchpoint("sglang.srt.managers.schedule_batch.Req.finished", "call", "summaries are emitted at the end", "(self)"),
    Touchpoint(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager.generate_request",
        "hook",
        "files each finished sequence's summary under the response's request id: SGLang's OpenAI layer copies only "
        "the meta_info keys it knows",
        "(self, obj, request=None)",
    ),
    Touchpoint(
        "sglang.srt.entrypoints.openai.serving_base.OpenAIServingBase.handle_request",
        "hook",
        "adds the summary to the OpenAI response (its response models drop unknown fields)",
        "(self, request, raw_request)",
    ),
    # --- the CPU engine's processes forked from the launcher (process_start.py)
    Touchpoint(
        "sglang.srt.entrypoints.engine._set_envs_and_config",
        "hook",
        "sets the start method to fork after SGLang sets spawn unconditionally there: no setting or registry chooses "
        "it, and the processes are started right after with the default context",
        "(server_args)",
    ),
    # --- behaviour SGLang keys on the algorithm's *name*, which a registered algorithm cannot share (listed to know)
    Touchpoint(
        f"{_SPEC}.spec_utils.spec_need_hidden_states",
        "call",
        "compares the name with 'STANDALONE': under MOE_SERVE_STANDALONE the scheduler relays draft hidden states the "
        "draft never reads (a cost, not an error)",
        "()",
    ),
)


class IncompatibleSGLang(SystemExit):
    """Raised at plugin load when a touchpoint moved or changed (SystemExit: SGLang does not swallow it)."""


def by_target() -> dict[str, Touchpoint]:
    return {t.target: t for t in TOUCHPOINTS}


def problems() -> list[str]:
    import sglang

    found = []
    if sglang.__version__ != SGLANG_VERSION:
        found.append(f"sglang {sglang.__version__} is installed, moe-serve is built against {SGLANG_VERSION}")
    for point in TOUCHPOINTS:
        problem = _check(point)
        if problem:
            found.append(f"{point.target} ({point.use}: {point.why}): {problem}")
    return found


def check_touchpoints() -> None:
    found = problems()
    if found:
        raise IncompatibleSGLang("moe-serve cannot run on this SGLang; what moved or changed:\n- " + "\n- ".join(found))


def hook(target: str, fn: Callable, kind: str) -> None:
    """Register an SGLang hook on an inventory target ("around" or "replace")."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    point = by_target().get(target)
    if point is None or point.use != "hook":
        raise ValueError(f"{target} is not a hook in the touchpoint inventory")
    HookRegistry.register(target, fn, HookType.AROUND if kind == "around" else HookType.REPLACE)


def _check(point: Touchpoint) -> str | None:
    if point.use == "attribute":
        return _check_attribute(point.target)
    try:
        obj = pkgutil.resolve_name(point.target)
    except (ImportError, AttributeError) as err:
        if point.use == "write" and _check_attribute(point.target) is None:
            return None  # an instance attribute we set, assigned in its class
        return f"not found ({err})"
    if point.signature is None:
        return None
    try:
        actual = plain_signature(obj)
    except (TypeError, ValueError) as err:
        return f"no signature ({err})"
    return None if actual == point.signature else f"signature is now {actual}, was {point.signature}"


def plain_signature(obj) -> str:
    """inspect.signature without annotations: "(self, batch, on_publish=None)"."""
    sig = inspect.signature(obj)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def _check_attribute(target: str) -> str | None:
    """`module.Class.name`: a class attribute, a dataclass field, an instance attribute its __init__ (or a method)
    assigns, or a parameter it registers on a layer."""
    owner_path, name = target.rsplit(".", 1)
    try:
        owner = pkgutil.resolve_name(owner_path)
    except (ImportError, AttributeError) as err:
        return f"owner not found ({err})"
    if hasattr(owner, name) or (
        dataclasses.is_dataclass(owner) and name in {f.name for f in dataclasses.fields(owner)}
    ):
        return None
    for cls in inspect.getmro(owner):
        source = _class_source(cls)
        # `self.x =`, `self.x:` or a tuple target `self.x, self.y = ...` at the start of a line; or a parameter the
        # class registers on a layer (`layer.register_parameter("x", ...)`: a quantization method's weights)
        if source and re.search(
            rf"self\.{name}\s*(:|=(?!=))|^\s*self\.{name},[^\n=]*=(?!=)|register_parameter\(\s*\"{name}\"",
            source,
            re.MULTILINE,
        ):
            return None
    return f"{owner.__name__} no longer has or assigns {name!r}"


@functools.cache
def _class_source(cls: type) -> str:
    """A class's source ("" where it has none): once per class, since inspect parses the class's whole module at each
    call and the inventory reads many attributes of the same classes, at every engine process's start."""
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return ""


def main() -> int:
    found = problems()
    print(f"{len(TOUCHPOINTS)} touchpoints; {len(found)} problem(s)")
    for line in found:
        print(" -", line)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
