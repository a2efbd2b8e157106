"""`MOE_SERVE_NGRAM`: SGLang's NGRAM drafter with moe-serve's per-request step.

One decode step, driven here instead of by hooks around SGLang's methods:
    open      hints and views of the batch (step.py)
    draft     NGRAM's trie lookup, only for requests whose hints allow drafts (a request capped at K = 0 is not looked
              up) and for resting ones, whose drafts are only judged (_timed_lookup); the others get a root-only tree
    plan      the policies' K_i, once each request's draft size D_i is known (the lookup costs the same whatever K)
    target    every L_i = min(K_i, D_i) + 1 == 1: a plain decode forward, no tree, no verify; otherwise a ragged
              verify of request i's first L_i nodes and SGLang's acceptance (verify.py)
    feed      the step's newest tokens into the trie (held back while no lookup can read them: CorpusFeed)
    shadow    a request that ran at K = 0 with a draft in hand: the draft judged by the tokens emitted (shadow.py)
    close     StepStats to the policies and metrics
Prefill (extend) batches take SGLang's own path. Everything below `forward_batch_generation` follows
NGRAMWorker.forward_batch_generation of SGLang 0.5.23 (the names it calls are pinned in touchpoints.py).
"""

from __future__ import annotations

import time

import numpy as np

from moe_sglang import plugin
from moe_sglang.plain_burst import burst_len
from moe_sglang.settings import EngineSettings
from moe_sglang.shadow import ShadowDrafts
from moe_sglang.step import SpecRuntime, StepInFlight, model_shape
from moe_sglang.verify import DraftTrees, plain_step, verify_step


def worker_class():
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    class MoeServeNgramWorker(NGRAMWorker):
        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            super().__init__(server_args, gpu_id, nccl_port, target_worker)
            self.settings = EngineSettings.from_env()
            self.spec_runtime = SpecRuntime(
                self.settings, model_shape(target_worker.model_config), request_stats=plugin.STATE.request_stats
            )
            self.corpus_feed = CorpusFeed(self.ngram_corpus, self.max_trie_depth)
            self.shadow = ShadowDrafts()  # drafts looked up for requests at K = 0, judged by the tokens emitted

        def clear_cache_pool(self):
            self.corpus_feed.drop()  # held-back windows belong to the corpus being reset
            super().clear_cache_pool()

        def forward_batch_generation(self, batch, on_publish=None, pp_proxy_tensors=None):
            if not batch.forward_mode.is_decode() or not batch.reqs:
                return super().forward_batch_generation(batch, on_publish, pp_proxy_tensors)
            step = self.spec_runtime.open(batch.reqs, max_k=self.draft_token_num - 1)
            trees = _timed_lookup(self, batch, step)
            plan = self.spec_runtime.plan(step, _unresting(trees.drafts, step))
            accept_lens = [min(k, d) + 1 for k, d in zip(plan.ks, trees.drafts, strict=True)]
            if max(accept_lens) == 1:
                out = plain_step(self, batch, step, burst_len(self, batch, step))
            else:
                out = verify_step(self, batch, step, trees, accept_lens)
            if on_publish is not None:
                on_publish(out.result.new_seq_lens)
            _update_corpus(self, batch, looked_up=trees.tokens is not None)
            verified = [n - 1 for n in accept_lens]
            shadow = _judge_shadow(self.shadow, step, verified, trees, out)
            self.spec_runtime.close(step, verified, out.accepted(), shadow)
            for column, sub in enumerate(out.following, start=1):  # a plain burst's later forwards (plain_burst.py)
                shadow = _judge_shadow(self.shadow, sub, verified, DraftTrees.nothing(len(verified)), out, column)
                self.spec_runtime.close(sub, verified, out.accepted(), shadow)
            return out.result

    return MoeServeNgramWorker


def _timed_lookup(worker, batch, step: StepInFlight) -> DraftTrees:
    """Drafts of the requests that may draft, and of the resting ones whose draft is not being judged already: a
    resting request's draft is judged by the tokens emitted (shadow.py), and one accepted to its end ends the rest
    (Decision.rest_until), so a text that turns predictable is noticed during a rest instead of at its end, and rests
    can be long (moe_serve.py, resting). With rests of at most 4 steps, three math requests on the CPU engine
    (moe-fine x48, batch 1, 31 tokens each) whose drafts could not pay woke for 42 of their 93 tokens, each waking
    step a scheduler step of its own (a rest's plain bursts pay the scheduler's ~1.1 ms once for up to 4 tokens):
    median TPOT 1.12x that of the same requests at a K = 0 hint; 1.02x with judgements during rests and the policy's
    hits counted only for drafts accepted to their end (forty-fifth session, 3 rounds, bench/results/rests-s45)."""
    start = time.perf_counter()
    resting = step.resting or (False,) * len(step.rids)
    rows = [
        i
        for i, (cap, rests, rid) in enumerate(zip(step.ceilings(), resting, step.rids, strict=True))
        if cap > 0 or (rests and rid not in worker.shadow.walks)
    ]
    trees = lookup(worker, batch.reqs, rows)
    if rows:
        worker.spec_runtime.count_draft()
    step.draft_s += time.perf_counter() - start
    return trees


def _unresting(drafts: list[int], step: StepInFlight) -> list[int]:
    """Draft depths as the policies see them: none for a resting request (its draft is only judged)."""
    if not step.resting:
        return drafts
    return [0 if rests else d for d, rests in zip(drafts, step.resting, strict=True)]


def _judge_shadow(
    shadow: ShadowDrafts, step: StepInFlight, verified: list[int], trees: DraftTrees, out, column: int = 0
):
    """Unverified drafts of this step's K = 0 requests, judged by what the target emitted (one host copy of the
    emitted tokens, only when such a request exists); `column`: which of a plain burst's tokens is this step's."""
    waiting = any(
        v == 0 and (d > 0 or rid in shadow.walks) for v, d, rid in zip(verified, trees.drafts, step.rids, strict=True)
    )
    if not waiting:
        return shadow.step(step.rids, verified, None, None, None, trees.drafts)
    emitted = out.result.next_token_ids.view(len(verified), -1)[:, column].tolist()
    return shadow.step(step.rids, verified, emitted, trees.tokens, trees.mask, trees.drafts)


def lookup(worker, reqs, rows: list[int]) -> DraftTrees:
    """NGRAM's trie lookup for the requests in `rows`; the others get root-only trees."""
    if not rows:
        return DraftTrees.nothing(len(reqs))  # nobody may draft: this step is a plain decode, no tree to build
    n = worker.draft_token_num
    roots = [req.output_ids[-1] if req.output_ids else req.origin_input_ids[-1] for req in reqs]
    trees = DraftTrees.roots_only(roots, n)
    tokens, mask = trees.tokens.reshape(len(reqs), n), trees.mask  # views: filled in place
    contexts = [_tail(reqs[i], worker.max_trie_depth) for i in rows]
    lengths = [len(reqs[i].origin_input_ids_unpadded) + len(reqs[i].output_ids) for i in rows]
    worker.corpus_feed.flush()
    worker.ngram_corpus.synchronize()
    drafts, drafted_mask = worker.ngram_corpus.batch_get([reqs[i].rid for i in rows], contexts, lengths)
    tokens[rows] = np.asarray(drafts, dtype=np.int64).reshape(len(rows), n)
    mask[rows] = np.asarray(drafted_mask, dtype=bool).reshape(len(rows), n, n)
    return DraftTrees(trees.tokens, mask, DraftTrees.count_drafts(mask))


def _tail(req, depth: int) -> list[int]:
    """The last `depth` tokens of prompt + output: what the trie can match."""
    tail = list(req.output_ids[-depth:])
    if len(tail) < depth:
        tail = list(req.origin_input_ids_unpadded[-(depth - len(tail)) :]) + tail
    return tail


def _update_corpus(worker, batch, looked_up: bool) -> None:
    """Feed the trie with every request's newest tokens (speculating or not: other requests draft from them) and
    forget the match state of requests that left the batch, as SGLang's NGRAM step does. After a step that looked
    up drafts the next one likely does too: the windows go to the corpus's insert thread now, which inserts them
    while the scheduler finishes this step, instead of at the next lookup, which would wait for it (py-spy: waiting
    in `synchronize` was 0.27 ms of a 31 ms batch-1 step with the insert right before the lookup)."""
    worker.corpus_feed.add(batch.reqs)
    if looked_up:
        worker.corpus_feed.flush()
    current = {req.rid for req in batch.reqs}
    departed = worker._prev_decode_rids - current
    if departed:
        worker.corpus_feed.flush()
        worker.ngram_corpus.erase_match_state(list(departed))
    worker._prev_decode_rids = current


class CorpusFeed:
    """What SGLang's NGRAM step puts into the trie after every decode step (each request's last `depth` tokens,
    `NGRAMWorker._update_ngram_corpus` without overlap scheduling, which our algorithm does not support), held back
    while no lookup can read it and put in one call: before any lookup, at the end of a step that looked up (the
    next lookup then finds them inserted, _update_corpus), and every FLUSH_STEPS steps. The trie gets
    the same windows in the same order before every lookup, so drafts are unchanged; what is saved is the per-call
    cost (two tensors built from the lists, a wake of the corpus's insert thread), ~2 % of a batch-1 step at K = 0."""

    FLUSH_STEPS = 16

    def __init__(self, corpus, depth: int) -> None:
        self.corpus, self.depth = corpus, depth
        self.pending: list[list[int]] = []
        self.steps = 0

    def add(self, reqs) -> None:
        self.pending.extend(_tail(req, self.depth) for req in reqs)
        self.steps += 1
        if self.steps >= self.FLUSH_STEPS:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.corpus.batch_put(self.pending)
        self.drop()

    def drop(self) -> None:
        self.pending, self.steps = [], 0
