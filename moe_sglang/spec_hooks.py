"""The SGLang hooks behind per-request speculation (issue 8), all AROUND hooks on SGLang 0.5.23 names:

| target | what the hook does |
|---|---|
| NGRAMWorker / EAGLEWorkerV2 .forward_batch_generation | a decode step: plan with the policies, run, report StepStats |
| ngram_worker.eagle_sample, eagle_worker_common.eagle_sample | verify with each request's tree cut at its K_i |
| NGRAMWorker._prepare_for_speculative_decoding | draft time; narrows the verify to the drafts K_i can use |
| EagleDraftWorker.draft / ._draft_extend_for_decode | draft time |
| TpModelWorker.forward_batch_generation (is_verify=True) | verify time; opens the expert-budget scope |
| TopK.forward_native / _cpu / _cuda | expert budget and expert counting inside that scope |

STANDALONE runs on the EAGLE V2 worker (StandaloneWorkerV2 subclasses it), so the EAGLE targets cover it. On GPU the
TopK hook is Python: under CUDA-graph replay of the verify forward it does not run (verify needs --disable-cuda-graph
for the budget, or a budget kernel captured in the graph; not done here), and the tree cut reads the tree links to
the host once per step. Only CPU is tested (CI); GPU runs these hooks untested.

Narrowing (draft_cut.narrow_verify) applies to NGRAM only and only where SGLang passes the draft-only tree mask (CPU:
its GPU path builds a full prefix mask and replays CUDA graphs of the full width); not with a grammar, logprobs or the
overlap scheduler (they read the worker's full stride from elsewhere). MOE_SERVE_NARROW_VERIFY=0 turns it off.
STANDALONE's draft model runs its fixed number of steps and its verify keeps the full tree (cut only).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from moe_sglang.draft_cut import (
    acceptable_tokens,
    cut_draft_trees,
    narrow_verify,
    node_depths,
    parents_precede_children,
    widen_rows,
)
from moe_sglang.expert_budget import BUDGET_MODES, VerifyExperts, route_in_verify
from moe_sglang.spec_step import SpecRuntime

BUDGET_MODE_ENV = "MOE_SERVE_BUDGET_MODE"
NARROW_ENV = "MOE_SERVE_NARROW_VERIFY"

_SPEC = "sglang.srt.speculative"
# step target -> (draft depth, verify tokens per request) of its worker
STEP_TARGETS = {
    f"{_SPEC}.ngram_worker.NGRAMWorker.forward_batch_generation": lambda w: (
        w.speculative_num_draft_tokens - 1,
        w.speculative_num_draft_tokens,
    ),
    f"{_SPEC}.eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation": lambda w: (
        w.speculative_num_steps,
        w.speculative_num_draft_tokens,
    ),
}
SAMPLE_TARGETS = (f"{_SPEC}.ngram_worker.eagle_sample", f"{_SPEC}.eagle_worker_common.eagle_sample")
NGRAM_PREPARE = f"{_SPEC}.ngram_worker.NGRAMWorker._prepare_for_speculative_decoding"
DRAFT_TARGETS = (
    f"{_SPEC}.eagle_worker_v2.EagleDraftWorker.draft",
    f"{_SPEC}.eagle_worker_v2.EagleDraftWorker._draft_extend_for_decode",
)
TARGET_FORWARD = "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation"
# forward_native is the CPU path without AMX (sglang/kernels/fused_op.py: _platform_key)
TOPK_TARGETS = tuple(f"sglang.srt.layers.moe.topk.TopK.forward_{p}" for p in ("native", "cpu", "cuda"))


def budget_mode_from_env() -> str:
    mode = os.environ.get(BUDGET_MODE_ENV, "truncation")
    if mode not in BUDGET_MODES:
        raise ValueError(f"{BUDGET_MODE_ENV}={mode!r}: expected one of {BUDGET_MODES}")
    return mode


def narrow_from_env() -> bool:
    value = os.environ.get(NARROW_ENV, "1")
    if value not in ("0", "1"):
        raise ValueError(f"{NARROW_ENV}={value!r}: expected 0 or 1")
    return value == "1"


def install(runtime: SpecRuntime) -> list[str]:
    """Register the hooks for this process; returns the targets."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    runtime.narrow = narrow_from_env()
    hooks: dict[str, Callable] = {NGRAM_PREPARE: _ngram_prepare_hook(runtime)}
    for target, shape in STEP_TARGETS.items():
        hooks[target] = _step_hook(runtime, shape)
    for target in SAMPLE_TARGETS:
        hooks[target] = _sample_hook(runtime)
    for target in DRAFT_TARGETS:
        hooks[target] = _draft_hook(runtime)
    hooks[TARGET_FORWARD] = _verify_hook(runtime)
    for target in TOPK_TARGETS:
        hooks[target] = _topk_hook(runtime)
    _check_targets(hooks)
    for target, hook in hooks.items():
        HookRegistry.register(target, hook, HookType.AROUND)
    return list(hooks)


def _check_targets(targets) -> None:
    """SGLang swallows a hook whose target moved; say so at load instead."""
    import pkgutil

    from moe_sglang.compat import SGLangCompatError

    missing = []
    for target in targets:
        try:
            pkgutil.resolve_name(target)
        except (ImportError, AttributeError) as err:
            missing.append(f"{target}: {err}")
    if missing:
        raise SGLangCompatError("moe-serve's speculation hooks have no target:\n- " + "\n- ".join(missing))


def _step_hook(runtime: SpecRuntime, shape: Callable) -> Callable:
    def around(original, worker, batch, *args, **kwargs):
        if batch is None or not batch.forward_mode.is_decode() or not batch.reqs or runtime.step is not None:
            return original(worker, batch, *args, **kwargs)
        narrow = _narrowable(runtime, worker, batch)
        layout = "rectangular" if narrow else "fixed"
        # NGRAM drafts the same whatever K is (a trie lookup): ask the policies once the draft's depth is known
        state = runtime.begin(batch, worker.target_worker, *shape(worker), layout, after_draft=narrow)
        try:
            result = original(worker, batch, *args, **kwargs)
        except BaseException:
            runtime.step = None
            raise
        finally:
            if state.narrowed_from:
                worker.draft_token_num = state.narrowed_from
        if state.narrowed_from:
            _widen_result(result, len(batch.reqs), state.verify_width, state.narrowed_from)
        runtime.end(state, result)
        return result

    return around


def _sample_hook(runtime: SpecRuntime) -> Callable:
    def around(original, verify_input, batch, *args, **kwargs):
        state = runtime.step
        if state is None or batch.forward_mode.is_idle():
            return original(verify_input, batch, *args, **kwargs)
        full = verify_input.retrieve_next_token
        if min(state.plan.ks) < state.max_k:
            # node depths from the prepare hook, when it computed them; narrowing keeps a prefix of the nodes
            known = None if state.node_depths is None else [d[: full.shape[1]] for d in state.node_depths]
            verify_input.retrieve_next_token = cut_draft_trees(
                full, verify_input.retrieve_next_sibling, list(state.plan.ks), known
            )
        try:
            out = original(verify_input, batch, *args, **kwargs)
        finally:
            verify_input.retrieve_next_token = full
        state.accept_lens = out[1]
        return out

    return around


def _ngram_prepare_hook(runtime: SpecRuntime) -> Callable:
    timed = _draft_hook(runtime)

    def around(original, worker, batch, *args, **kwargs):
        out = timed(original, worker, batch, *args, **kwargs)
        state = runtime.step
        # a step waiting for its draft is one the step hook found narrowable
        if state is not None and state.pending is not None and batch.forward_mode.is_target_verify():
            _narrow_ngram_verify(runtime, worker, batch, state)
        return out

    return around


def _narrowable(runtime: SpecRuntime, worker, batch) -> bool:
    """Whether this step's verify may be narrowed (module docstring): an NGRAM worker on CPU, nothing that reads the
    worker's full stride elsewhere."""
    return (
        runtime.narrow
        and hasattr(worker, "ngram_corpus")
        and str(worker.device) == "cpu"
        and not batch.has_grammar
        and not batch.return_logprob
        and not worker.enable_overlap
    )


def _narrow_ngram_verify(runtime: SpecRuntime, worker, batch, state) -> None:
    """Plan the step if it waits for the draft, then replace the NGRAM verify input by its first W nodes per request
    (module docstring) and run the rest of the step at width W; the step hook restores the worker's width and
    widens what the step returns."""
    from sglang.srt.speculative.ngram_info import NgramVerifyInput

    spec, bs = batch.spec_info, len(batch.reqs)
    n = spec.draft_token_num
    state.node_depths = node_depths(spec.retrieve_next_token.tolist(), spec.retrieve_next_sibling.tolist())
    depths = [max(d) for d in state.node_depths]  # per request: the most drafts it could accept
    runtime.plan_after_draft(state, depths)
    if spec.custom_mask is None or spec.custom_mask.numel() != bs * n * n:
        return  # not the draft-only mask
    state.verified_ks = tuple(min(k, d) for k, d in zip(state.plan.ks, depths, strict=True))
    width = max(state.verified_ks) + 1
    if width >= n or not parents_precede_children(spec.custom_mask.reshape(bs, n, n)):
        return
    cut = narrow_verify(
        width,
        bs,
        n,
        {
            "draft_tokens": spec.draft_token,
            "positions": spec.positions,
            "out_cache_loc": batch.out_cache_loc,
            "tree_mask": spec.custom_mask,
            "retrieve_next_token": spec.retrieve_next_token,
            "retrieve_next_sibling": spec.retrieve_next_sibling,
        },
    )
    batch.input_ids = cut["draft_tokens"]
    batch.out_cache_loc = cut["out_cache_loc"]
    batch.spec_info = NgramVerifyInput(
        draft_token=cut["draft_tokens"],
        custom_mask=cut["tree_mask"],
        positions=cut["positions"],
        retrieve_index=cut["retrieve_index"],
        retrieve_next_token=cut["retrieve_next_token"],
        retrieve_next_sibling=cut["retrieve_next_sibling"],
        draft_token_num=width,
    )
    worker.draft_token_num = width  # read by the rest of forward_batch_generation (accept, next draft input)
    state.narrowed_from, state.verify_width = n, width


def _widen_result(result, bs: int, width: int, n: int) -> None:
    """A narrowed step's accepted tokens back in the worker's full [bs, n] stride (scheduler, batch merge/filter)."""
    tokens = widen_rows(result.next_token_ids, bs, width, n)
    result.next_token_ids = tokens
    draft_input = result.next_draft_input
    if draft_input is not None:
        draft_input.accept_tokens = tokens
        draft_input.draft_token_num = draft_input.num_tokens_per_req = n
        draft_input.num_tokens_for_logprob_per_req = n


def _draft_hook(runtime: SpecRuntime) -> Callable:
    def around(original, *args, **kwargs):
        start = time.perf_counter()
        runtime.draft_depth += 1
        try:
            return original(*args, **kwargs)
        finally:
            runtime.draft_depth -= 1
            if runtime.step is not None and runtime.draft_depth == 0:
                runtime.step.draft_s += time.perf_counter() - start

    return around


def _verify_hook(runtime: SpecRuntime) -> Callable:
    def around(original, *args, **kwargs):
        state = runtime.step
        if state is None or not kwargs.get("is_verify") or runtime.draft_depth:
            return original(*args, **kwargs)
        start = time.perf_counter()
        runtime.verify = VerifyExperts(
            budget=state.plan.expert_budget, mode=runtime.budget_mode, token_weights=_token_weights(state, args, kwargs)
        )
        try:
            result = original(*args, **kwargs)
            state.unique_experts, state.dropped_experts = runtime.verify.counts()
        finally:
            runtime.verify = None
            state.verify_s += time.perf_counter() - start
        return result

    return around


def _token_weights(state, args, kwargs):
    """Which verify tokens vote for the budget; None when there is no budget or every token can be accepted."""
    if state.plan.expert_budget is None or min(state.plan.ks) >= state.max_k:
        return None
    batch = kwargs.get("forward_batch") or kwargs.get("batch") or (args[1] if len(args) > 1 else None)
    spec = getattr(batch, "spec_info", None)
    if getattr(spec, "retrieve_next_token", None) is None:
        return None
    return acceptable_tokens(spec.retrieve_next_token, spec.retrieve_next_sibling, list(state.plan.ks))


def _topk_hook(runtime: SpecRuntime) -> Callable:
    def around(original, topk, hidden_states, router_logits, *args, **kwargs):
        out = original(topk, hidden_states, router_logits, *args, **kwargs)
        scope = runtime.verify
        if scope is None or topk.is_draft or not hasattr(out, "topk_ids") or not hasattr(out, "_replace"):
            return out
        config = topk.topk_config
        plain = not config.use_grouped_topk and config.correction_bias is None and config.scoring_func == "softmax"
        weights, ids = route_in_verify(
            scope,
            topk.layer_id,
            out.topk_weights,
            out.topk_ids,
            router_logits,
            renormalize=config.renormalize,
            plain_softmax=plain and config.custom_routing_function is None,
        )
        return out._replace(topk_weights=weights, topk_ids=ids)

    return around
