"""`MOE_SERVE_NGRAM`: SGLang's NGRAM drafter with moe-serve's per-request step.

One decode step, driven here instead of by hooks around SGLang's methods:
    open      hints and views of the batch (step.py)
    draft     NGRAM's trie lookup, only for requests whose hints allow drafts (a request capped at K = 0 is not looked
              up); the others get a root-only tree
    plan      the policies' K_i, once each request's draft depth D_i is known (the lookup costs the same whatever K)
    forward   every L_i = min(K_i, D_i) + 1 == 1: a plain decode forward (plain_decode.py), no tree, no verify;
              otherwise a ragged verify (ragged.py): request i's first L_i nodes in one compact forward
    accept    SGLang's own acceptance (eagle_sample), KV move and logprobs on the dense [bs, n] layout
    close     StepStats to the policies and metrics
Prefill (extend) batches take SGLang's own path. Everything below `forward_batch_generation` follows
NGRAMWorker.forward_batch_generation of SGLang 0.5.23 (the names it calls are pinned in touchpoints.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from moe_sglang.accept import StepOutput, accept_on_dense_rows, forward_lens
from moe_sglang.expert_budget import verify_scope
from moe_sglang.plain_decode import last_tokens, run_plain_decode
from moe_sglang.ragged import RaggedVerify, parents_precede_children
from moe_sglang.settings import EngineSettings
from moe_sglang.step import SpecRuntime, StepInFlight, model_shape


@dataclass(frozen=True)
class NgramTrees:
    """This step's draft trees in SGLang's dense NGRAM layout (host arrays, as the corpus returns them)."""

    tokens: np.ndarray  # [bs * n] int64, node 0 of each row = the request's last token (the root)
    mask: np.ndarray  # [bs, n, n] bool, [b, i, j] = node j is an ancestor of (or is) node i
    depths: list[int]  # [bs] D_i: depth of request i's tree (0 = no draft)


def worker_class():
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    class MoeServeNgramWorker(NGRAMWorker):
        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            super().__init__(server_args, gpu_id, nccl_port, target_worker)
            self.settings = EngineSettings.from_env()
            self.spec_runtime = SpecRuntime(self.settings, model_shape(target_worker.model_config))

        def forward_batch_generation(self, batch, on_publish=None, pp_proxy_tensors=None):
            if not batch.forward_mode.is_decode() or not batch.reqs:
                return super().forward_batch_generation(batch, on_publish, pp_proxy_tensors)
            step = self.spec_runtime.open(batch.reqs, max_k=self.draft_token_num - 1)
            trees = _timed_lookup(self, batch, step)
            plan = self.spec_runtime.plan(step, trees.depths)
            accept_lens = [min(k, d) + 1 for k, d in zip(plan.ks, trees.depths, strict=True)]
            if max(accept_lens) == 1:
                out = _plain_step(self, batch, step)
            else:
                out = _verify_step(self, batch, step, trees, accept_lens)
            if on_publish is not None:
                on_publish(out.result.new_seq_lens)
            _update_corpus(self, batch)
            self.spec_runtime.close(step, [n - 1 for n in accept_lens], out.accepted())
            return out.result

    return MoeServeNgramWorker


def _timed_lookup(worker, batch, step: StepInFlight) -> NgramTrees:
    start = time.perf_counter()
    rows = [i for i, cap in enumerate(step.ceilings()) if cap > 0]
    trees = lookup(worker, batch.reqs, rows)
    if rows:
        worker.spec_runtime.count_draft()
    step.draft_s += time.perf_counter() - start
    return trees


def lookup(worker, reqs, rows: list[int]) -> NgramTrees:
    """NGRAM's trie lookup for the requests in `rows`; the others get root-only trees (each node sees only itself)."""
    n, bs = worker.draft_token_num, len(reqs)
    roots = [req.output_ids[-1] if req.output_ids else req.origin_input_ids[-1] for req in reqs]
    tokens = np.repeat(np.asarray(roots, dtype=np.int64), n).reshape(bs, n)
    mask = np.broadcast_to(np.eye(n, dtype=bool), (bs, n, n)).copy()
    if rows:
        depth = worker.max_trie_depth
        contexts = [_tail(reqs[i], depth) for i in rows]
        lengths = [len(reqs[i].origin_input_ids_unpadded) + len(reqs[i].output_ids) for i in rows]
        worker.ngram_corpus.synchronize()
        drafts, drafted_mask = worker.ngram_corpus.batch_get([reqs[i].rid for i in rows], contexts, lengths)
        tokens[rows] = np.asarray(drafts, dtype=np.int64).reshape(len(rows), n)
        mask[rows] = np.asarray(drafted_mask, dtype=bool).reshape(len(rows), n, n)
    depths = (mask.sum(-1).max(-1) - 1).tolist()  # a node's ancestors-or-self count - 1 = its depth
    return NgramTrees(tokens.reshape(-1), mask, depths)


def _tail(req, depth: int) -> list[int]:
    """The last `depth` tokens of prompt + output: what the trie can match."""
    tail = list(req.output_ids[-depth:])
    if len(tail) < depth:
        tail = list(req.origin_input_ids_unpadded[-(depth - len(tail)) :]) + tail
    return tail


def _plain_step(worker, batch, step: StepInFlight) -> StepOutput:
    start = time.perf_counter()
    roots = last_tokens(batch.reqs, worker.device)
    plain = run_plain_decode(worker.target_worker, batch, roots)
    step.verify_s += time.perf_counter() - start
    worker.spec_runtime.count_forward("decode", roots.numel())
    return StepOutput.plain(batch, plain, worker.draft_token_num, worker.speculative_num_draft_tokens)


def _verify_step(worker, batch, step: StepInFlight, trees: NgramTrees, accept_lens: list[int]) -> StepOutput:
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
    from sglang.kernels.ops.speculative.reconstruct_tree import reconstruct_indices_from_tree_mask_func
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.ngram_info import NgramVerifyInput

    bs, n, device = len(batch.reqs), worker.draft_token_num, worker.device
    draft_tokens = torch.from_numpy(trees.tokens).to(device)  # [bs * n]
    tree_mask = torch.from_numpy(trees.mask.reshape(-1)).to(device)  # [bs * n * n]
    if not parents_precede_children(tree_mask.reshape(bs, n, n)):
        accept_lens = [n] * bs  # node order is not a tree order: only the whole tree is safe to verify
    positions = worker.positions_batch[bs]
    retrieve = (worker.retrieve_indexes_batch[bs], worker.retrieve_next_token_batch[bs])
    next_sibling = worker.retrieve_next_sibling_batch[bs]
    reconstruct_indices_from_tree_mask_func(tree_mask, batch.seq_lens, positions, *retrieve, next_sibling, bs, n)
    dense_loc = assign_extend_cache_locs_func(
        req_pool_indices=batch.req_pool_indices,
        req_to_token=batch.req_to_token_pool.req_to_token,
        start_offset=batch.seq_lens,
        end_offset=batch.seq_lens + n,
        batch_size=bs,
        draft_token_num=n,
        device=device,
    )
    accept = RaggedVerify.from_lens(accept_lens, n, device)
    verify = RaggedVerify.from_lens(forward_lens(accept_lens, n, worker.settings.verify_layout), n, device)
    if worker.settings.verify_layout != "ragged":
        step.verify_width = verify.lens[0]
    dense = NgramVerifyInput(
        draft_token=draft_tokens,
        custom_mask=tree_mask,
        positions=positions,
        retrieve_index=retrieve[0],
        retrieve_next_token=accept.cut_links(retrieve[1]),
        retrieve_next_sibling=accept.cut_links(next_sibling),
        draft_token_num=n,
    )
    compact = NgramVerifyInput(
        draft_token=verify.pack(draft_tokens),
        custom_mask=verify.pack_tree_mask(tree_mask),
        positions=verify.pack(positions),
        retrieve_index=dense.retrieve_index,
        retrieve_next_token=dense.retrieve_next_token,
        retrieve_next_sibling=dense.retrieve_next_sibling,
        draft_token_num=n,
    )
    compact.ragged_verify_layout = verify.layout(device)
    batch.forward_mode = ForwardMode.TARGET_VERIFY
    batch.input_ids, batch.out_cache_loc, batch.spec_info = compact.draft_token, verify.pack(dense_loc), compact
    grammar_host = (trees.mask.reshape(-1), trees.tokens) if batch.has_grammar else None
    logits_output, can_run_graph = _verify_forward(worker, batch, step, verify, accept)
    batch.input_ids, batch.out_cache_loc, batch.spec_info = draft_tokens, dense_loc, dense
    out = accept_on_dense_rows(worker, batch, dense, logits_output, can_run_graph, grammar_host)
    batch.forward_mode = ForwardMode.DECODE
    return out


def _verify_forward(worker, batch, step: StepInFlight, verify: RaggedVerify, accept: RaggedVerify):
    """The target's compact verify forward inside the expert-budget scope; logits scattered back to dense rows."""
    weights = None if verify.lens == accept.lens else verify.acceptable(accept.lens)
    worker.spec_runtime.count_forward("verify", batch.input_ids.numel())  # the forward's own input rows
    start = time.perf_counter()
    with verify_scope(step.plan.expert_budget, worker.settings.budget_mode, weights) as experts:
        result = worker.target_worker.forward_batch_generation(batch, is_verify=True)
        step.unique_experts, step.dropped_experts = experts.counts()
    step.verify_s += time.perf_counter() - start
    logits = result.logits_output
    logits.next_token_logits = verify.unpack(logits.next_token_logits)
    if logits.hidden_states is not None:
        logits.hidden_states = verify.unpack(logits.hidden_states)
    return logits, result.can_run_cuda_graph


def _update_corpus(worker, batch) -> None:
    """Feed the trie with every request's newest tokens (speculating or not: other requests draft from them) and
    forget the match state of requests that left the batch, as SGLang's NGRAM step does."""
    worker._update_ngram_corpus(batch)
    current = {req.rid for req in batch.reqs}
    departed = worker._prev_decode_rids - current
    if departed:
        worker.ngram_corpus.erase_match_state(list(departed))
    worker._prev_decode_rids = current
