"""The target side of a decode step, the same for every drafter: a plain decode when nobody speculates, else a ragged
verify of each request's first L_i = min(K_i, D_i) + 1 draft nodes (ragged.py) and SGLang's acceptance (accept.py).

Drafters hand over `DraftTrees` in SGLang's dense NGRAM layout: `n` nodes per request, node 0 = the request's last
token (the root), parents before children, a request without drafts as a root-only row (each node sees only itself).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from moe_sglang.accept import StepOutput, accept_on_dense_rows, forward_lens
from moe_sglang.expert_budget import routing_scope
from moe_sglang.plain_burst import input_pending
from moe_sglang.plain_decode import last_tokens, run_plain_decode
from moe_sglang.ragged import RaggedVerify, parents_precede_children
from moe_sglang.step import StepInFlight
from service.kernels.spec_tree import reconstruct_indices_from_tree_mask_host


@dataclass(frozen=True)
class DraftTrees:
    """One step's draft trees in the dense layout (host arrays)."""

    tokens: np.ndarray | None  # [bs * n] int64, node 0 of each row = the request's root; None: no draft at all
    mask: np.ndarray | None  # [bs, n, n] bool, [b, i, j] = node j is an ancestor of (or is) node i
    drafts: list[int]  # [bs] D_i: draft nodes in request i's tree (0 = none)

    @classmethod
    def nothing(cls, bs: int) -> DraftTrees:
        """No request has a draft: the step will be a plain decode, which needs no tree."""
        return cls(None, None, [0] * bs)

    @classmethod
    def roots_only(cls, roots: list[int], stride: int) -> DraftTrees:
        bs = len(roots)
        tokens = np.repeat(np.asarray(roots, dtype=np.int64), stride)
        mask = np.broadcast_to(np.eye(stride, dtype=bool), (bs, stride, stride)).copy()
        return cls(tokens, mask, [0] * bs)

    @staticmethod
    def count_drafts(mask: np.ndarray) -> list[int]:
        """[bs] nodes with an ancestor (depth >= 1): the drafts; padding nodes see only themselves."""
        return (mask.sum(-1) > 1).sum(-1).tolist()


def plain_step(worker, batch, step: StepInFlight, burst: int = 1) -> StepOutput:
    """A plain decode step; `burst` > 1: up to that many plain forwards, each a step of its own to the policies and
    stats (StepOutput.following), their tokens one accepted run per request to the scheduler (plain_burst.py)."""
    roots = last_tokens(batch.reqs, worker.device)
    runtime = worker.spec_runtime
    # measured where some request may draft, now or once its rest ends (a resting batch of one asks no policy, but
    # its later drafts are priced by what its plain steps reuse: without it, prose's drafts were priced as code's)
    measure = bool(step.views or step.resting)
    rids = [req.rid for req in batch.reqs] if measure else None
    tokens, following, sub, start = [], [], step, time.perf_counter()
    # a burst after a step whose plan put the batch to rest (plain_burst.py): its later forwards are resting steps
    rested = tuple(rid in runtime.resting for rid in step.rids) if step.views and burst > 1 else None
    for j in range(burst):
        # counted (the policies price what a step read) and kept per request: the share of a token's experts that
        # the request's next token reuses is what an accepted draft would reuse (`expert_reuse`); one token per
        # layer is counted without a tensor op (VerifyExperts.counts), the routing hook keeps only references
        with routing_scope(None, worker.settings.budget_mode) as experts:
            plain = run_plain_decode(worker.target_worker, batch, roots, offset=j)
        sub.unique_experts = experts.counts()[0]
        if measure:
            follows = j > 0 or runtime.last_routing_step == runtime.steps  # the previous decode step was plain too
            sub.expert_reuse, runtime.last_routing = expert_reuse(
                runtime.last_routing if follows else {}, rids, experts.token_experts()
            )
        now = time.perf_counter()
        sub.verify_s += now - start
        sub.plain = True
        runtime.count_forward("decode", roots.numel())
        roots = plain.next_tokens
        tokens.append(roots)
        if j + 1 == burst or input_pending():
            break
        sub.ended, start = now, now
        sub = sub.following(now, rested)
        following.append(sub)
    if measure:
        runtime.last_routing_step = runtime.steps + 1 + len(following)  # the step count once all are closed
    else:  # nobody in the batch may draft (hints, step.open): no draft is priced by its reuse, none measured
        runtime.last_routing = {}
    out = StepOutput.plain(batch, plain, tokens, _stride(worker), worker.speculative_num_draft_tokens)
    out.following = tuple(following)
    return out


def expert_reuse(
    last: dict[str, tuple[tuple[int, ...], ...]], rids: list[str], routed: list[list[list[int]]] | None
) -> tuple[tuple[float | None, ...], dict[str, tuple[tuple[int, ...], ...]]]:
    """Per request, the share of the experts its token routed to (mean over layers) that its previous token, decoded
    by the previous plain step (`last`), also routed to (None where not known), and the new `last`: this step's
    requests' routing, [L][k] each. `routed`: [L][bs][k] (VerifyExperts.token_experts). On the CPU engine's moe-fine
    x48 (32 experts, top-4) a batch-1 prose request's 2-draft verifies whose drafts were accepted touched 4-5
    experts per layer (26-28 ms, a plain step's 24-25), a code request's 1-draft accepted verifies 8 (40-43 ms): an
    accepted draft reuses what the text makes consecutive tokens reuse, which differs by request.
    Host lists, not tensor ops: a few dozen ids per request, where each tensor op would cost more than the count."""
    if routed is None or len(routed[0]) != len(rids):
        return (), {}
    now = {rid: tuple(tuple(layer[i]) for layer in routed) for i, rid in enumerate(rids)}
    reuse: list[float | None] = []
    for rid in rids:
        mine, before = now[rid], last.get(rid)
        if before is None or [len(e) for e in before] != [len(e) for e in mine]:
            reuse.append(None)
            continue
        hits = sum(e in prev for experts, prev in zip(mine, before, strict=True) for e in experts)
        reuse.append(hits / sum(len(e) for e in mine))
    return tuple(reuse), now


def verify_step(worker, batch, step: StepInFlight, trees: DraftTrees, accept_lens: list[int]) -> StepOutput:
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.ngram_info import NgramVerifyInput

    bs, n, device = len(batch.reqs), _stride(worker), worker.device
    if trees.tokens is None:
        raise ValueError("a verify step needs draft trees; a step without drafts is a plain decode")
    draft_tokens = torch.from_numpy(trees.tokens).to(device)  # [bs * n]
    tree_mask = torch.from_numpy(trees.mask.reshape(-1)).to(device)  # [bs * n * n]
    if not parents_precede_children(tree_mask.reshape(bs, n, n)):
        accept_lens = [n] * bs  # node order is not a tree order: only the whole tree is safe to verify
    positions, retrieve_index, next_token, next_sibling = _tree_indices(trees.mask, tree_mask, batch.seq_lens)
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
        retrieve_index=retrieve_index,
        retrieve_next_token=accept.cut_links(next_token),
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


def _tree_indices(mask: np.ndarray, tree_mask: torch.Tensor, seq_lens: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """positions [bs*n] and retrieve_index / next_token / next_sibling [bs, n] of the draft trees (`mask` [bs, n, n]
    on the host, `tree_mask` the same on the engine's device), as SGLang's reconstruct_indices_from_tree_mask gives
    them; on a CPU engine from the host trees, in numpy (service/kernels/spec_tree.py: our torch version of the op took
    ~0.45 ms of a 22-25 ms batch-1 STANDALONE step)."""
    if tree_mask.device.type == "cpu":
        return tuple(torch.from_numpy(a) for a in reconstruct_indices_from_tree_mask_host(mask, seq_lens.numpy()))
    from sglang.kernels.ops.speculative.reconstruct_tree import reconstruct_indices_from_tree_mask_func

    bs, n, _ = mask.shape
    positions = torch.empty(bs * n, dtype=torch.int64, device=tree_mask.device)
    links = [torch.empty(bs, n, dtype=torch.int64, device=tree_mask.device) for _ in range(3)]
    reconstruct_indices_from_tree_mask_func(tree_mask, seq_lens, positions, *links, bs, n)
    return positions, *links


def _verify_forward(worker, batch, step: StepInFlight, verify: RaggedVerify, accept: RaggedVerify):
    """The target's compact verify forward inside the expert-budget scope; logits scattered back to dense rows."""
    weights = None if verify.lens == accept.lens else verify.acceptable(accept.lens)
    worker.spec_runtime.count_forward("verify", batch.input_ids.numel())  # the forward's own input rows
    start = time.perf_counter()
    with routing_scope(step.plan.expert_budget, worker.settings.budget_mode, weights) as experts:
        result = worker.target_worker.forward_batch_generation(batch, is_verify=True)
        step.unique_experts, step.dropped_experts = experts.counts()
    step.verify_s += time.perf_counter() - start
    logits = result.logits_output
    logits.next_token_logits = verify.unpack(logits.next_token_logits)
    if logits.hidden_states is not None:
        logits.hidden_states = verify.unpack(logits.hidden_states)
    return logits, result.can_run_cuda_graph


def _stride(worker) -> int:
    """n: nodes per request in the dense layout (the configured number of draft tokens, root included)."""
    return worker.speculative_num_draft_tokens
