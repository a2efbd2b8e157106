"""Drafting with a STANDALONE draft model, per request: request i drafts only when its K_i > 0, to depth
min(K_i, speculative_num_steps), and keeps its best K_i draft nodes (draft_tree.py).

The draft model's KV cache is caught up lazily. SGLang's STANDALONE worker extends the draft's cache with every
request's new tokens every step (a draft forward of `n` tokens per request even when nobody speculates). Here each
request remembers how far the draft cache is valid (`seen`: positions [0, seen) hold the draft's KV of the
request's own tokens, in the same KV slots the target uses); when it drafts again, its first draft forward runs the
tokens since then plus the root in one extend. A request at K = 0 therefore costs the draft model nothing, and one
that speculates after a pause pays one catch-up forward instead of one per step. Where a core is spare
(draft_thread.py), a new prompt's catch-up runs beside the target's prefill instead (`prefill_later`) and a
judgement beside the step's target forward (draft_judge.py's `judge_later`), off the step's path. The draft is fed
each token at its own position (SGLang's STANDALONE feeds its draft the prompt shifted by one, EAGLE's convention).

Every draft forward runs the draft model over a subset of the batch with ragged lengths and a tree mask, directly
over its KV pool (draft_forward.py: a Llama-shaped float32 draft on CPU) or else as a TARGET_VERIFY forward through
SGLang's runner (a RaggedVerifyLayout read by the ragged-aware attention backend, cpu_attention.py):
    depth 1    tokens [seen, seq_len] of each drafting request, causal, after prefix [0, seen)
    depth d    the frontier's paths (root excluded) with their tree mask, after prefix [0, seq_len] (root included)
Chain nodes are written at their own positions' slots, so when drafts are accepted their draft KV stays valid.

Stopping a chain where the target will likely reject it (`draft`'s `stops` and `accept_stops`, chains only):
draft_stop.py.

Judging a request at K = 0 without a verify (Decision.judge): draft_judge.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from moe_sglang.draft_forward import DirectDraft
from moe_sglang.draft_stop import stop_unlikely
from moe_sglang.draft_thread import Beside
from moe_sglang.draft_tree import DraftTree
from moe_sglang.ragged import verify_layout
from moe_sglang.verify import DraftTrees
from service.models.accept_head import AcceptHead

# The longest context a prefill's catch-up runs beside the target's prefill (prefill_later): its forward attends
# densely over each request's tokens ([T, T] scores per head), which past this is left to the lazy catch-up.
PREFILL_CATCH_UP = 2048


@dataclass
class DraftRequest:
    """A drafting request's part of one step."""

    row: int  # index in the batch
    seq_len: int  # committed tokens (the root is at position seq_len)
    depth_cap: int  # the deepest draft level it grows (after a stop: the depth it stopped at)
    tree: DraftTree
    stop: float = 0.0  # its chain stops at a draft below this multiple of its runner-up's probability (0: never)
    accept_stop: float = 0.0  # ... at a draft the acceptance head gives below this probability (0: never)
    kept: int | None = None  # drafts kept after such a stop (the ones above it); None: no stop


@dataclass
class DraftModelDrafter:
    worker: object  # SGLang's TpModelWorker of the draft model
    topk: int  # children per expanded node (1 = chains)
    max_depth: int  # speculative_num_steps
    stride: int  # n: nodes per request in the dense layout
    seen: dict[str, int] = field(default_factory=dict)  # rid -> [0, seen) of its positions are in the draft cache
    rows_selected: bool = False  # its logits processor computes only the rows a forward asks for (SelectedLogits)
    direct: DirectDraft | None = None  # the forward without SGLang's runner (draft_forward.py); None: the runner
    head: AcceptHead | None = None  # the draft's acceptance head (draft_stop.py); used on the direct forward only

    @property
    def gated(self) -> bool:
        """Its chains stop at their first draft the acceptance head doubts, where a request asks (draft_stop.py):
        a head, the direct forward that hands the head its hidden states, and chains (stops apply to chains only)."""
        return self.head is not None and self.direct is not None and self.topk == 1

    def reset(self, rids: list[str]) -> None:
        """Prefill (or re-prefill after a retraction): nothing of these requests is in the draft cache yet."""
        for rid in rids:
            self.seen[rid] = 0

    def backlogs(self, batch) -> list[int]:
        """Per request, the tokens its next first draft forward runs beyond the root (what `_catch_up` adds to a
        draft cache that is in step): its lag behind the committed tokens."""
        return [max(s - self.seen.get(req.rid, 0), 0) for req, s in zip(batch.reqs, seq_lens_of(batch), strict=True)]

    def draft(
        self, batch, budgets: list[int], stops: list[float] | None = None, accept_stops: list[float] | None = None
    ) -> tuple[DraftTrees, list[DraftRequest], int]:
        """Draft trees of the requests with budgets[i] > 0 (root-only rows for the others), the drafting requests,
        and how many sequential draft forwards ran; `stops[i]`, `accept_stops[i]`: where request i's chain stops
        (draft_stop.py; 0 or None: it drafts to its budget)."""
        chains = self.topk == 1
        roots = [_tokens(req)[-1] for req in batch.reqs]
        trees = DraftTrees.roots_only(roots, self.stride)
        seq = seq_lens_of(batch)
        drafting = [
            DraftRequest(
                i,
                seq[i],
                min(k, self.max_depth),
                DraftTree(roots[i], self.topk),
                stop=stops[i] if stops and chains else 0.0,
                accept_stop=accept_stops[i] if accept_stops and chains else 0.0,
            )  # fmt: skip
            for i, k in enumerate(budgets)
            if k > 0
        ]
        if not drafting:
            return trees, [], 0
        self._catch_up(batch, drafting)
        forwards = 1
        for depth in range(2, max(r.depth_cap for r in drafting) + 1):
            growing = [r for r in drafting if r.depth_cap >= depth]
            if not growing:  # every chain stopped
                break
            self._grow(batch, growing)
            forwards += 1
        tokens, mask, drafts = trees.tokens.reshape(-1, self.stride), trees.mask, list(trees.drafts)
        for r in drafting:
            kept = r.tree.keep(budgets[r.row] if r.kept is None else min(budgets[r.row], r.kept))
            tokens[r.row], mask[r.row] = r.tree.dense_row(kept, self.stride)
            drafts[r.row] = len(kept)
        return DraftTrees(trees.tokens, mask, drafts), drafting, forwards

    def accepted(self, batch, drafting: list[DraftRequest], accepted: list[int]) -> None:
        """After verification: how far each drafting request's draft cache is now valid."""
        for r in drafting:
            rid = batch.reqs[r.row].rid
            # chain nodes 1..depth_cap-1 were run at their own positions; tree branches in scratch slots
            valid_drafts = min(accepted[r.row], r.depth_cap - 1) if self.topk == 1 else 0
            self.seen[rid] = r.seq_len + 1 + valid_drafts
        if len(self.seen) > 4 * len(batch.reqs) + 256:  # forget requests that left
            live = {req.rid for req in batch.reqs}
            self.seen = {rid: s for rid, s in self.seen.items() if rid in live}

    def prefill_later(self, batch, beside: Beside, drafts: list[bool] | None = None) -> Callable[[], int]:
        """After `reset` of a prefill's requests: where `beside` runs on a thread of its own and the draft forward is
        the direct one, the draft model's catch-up over each request that may draft (`drafts[i]`, default all)
        whose whole context this prefill puts in the target's cache (not a chunk of a longer prompt) and that has at
        most PREFILL_CATCH_UP tokens, run beside the target's prefill; the join marks them caught up (`seen`) and
        returns the tokens it ran. A request's first judgement then runs only what it emitted since. On the
        scheduler's own thread nothing runs here: the catch-up stays lazy (a request whose drafter is never judged
        never pays it)."""
        if not beside.threaded or self.direct is None:
            return lambda: 0
        seq = seq_lens_of(batch)
        drafts = drafts or [True] * len(batch.reqs)
        rows = [
            i
            for i, req in enumerate(batch.reqs)
            if drafts[i]
            and 0 < seq[i] <= PREFILL_CATCH_UP
            and seq[i] == len(req.origin_input_ids) + len(req.output_ids)
        ]
        if not rows:
            return lambda: 0
        caught = [DraftRequest(i, seq[i], 0, None) for i in rows]
        rids = [batch.reqs[r.row].rid for r in caught]
        parts = [self.lag_part(batch.reqs[r.row], r.seq_len - 1) for r in caught]  # tokens [0, seq_len)
        ends = (np.cumsum([len(p.tokens) for p in parts]) - 1).tolist()  # one row each: the LM head is not needed
        inputs = direct_inputs(batch, caught, parts, ends)
        ran = beside(lambda: self.direct.logits(*inputs))

        def caught_up() -> int:
            ran()
            for rid, r in zip(rids, caught, strict=True):
                self.seen[rid] = r.seq_len
            return sum(r.seq_len for r in caught)

        return caught_up

    def _catch_up(self, batch, drafting: list[DraftRequest]) -> None:
        """Depth 1: the tokens the draft cache lacks, the root last; its logits give the first draft level."""
        parts = [self.lag_part(batch.reqs[r.row], r.seq_len) for r in drafting]
        ends = (np.cumsum([len(p.tokens) for p in parts]) - 1).tolist()
        logits, hidden = self.forward(batch, drafting, parts, ends, hidden=self._wants_hidden(drafting))
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        for r, row in zip(drafting, logprobs, strict=True):
            r.tree.expand(row[None])
        stop_unlikely(drafting, logprobs, hidden, self.head)

    def _wants_hidden(self, drafting: list[DraftRequest]) -> bool:
        """Whether this forward keeps the final hidden states: a request asks the head (draft_stop.py)."""
        return self.gated and any(r.accept_stop > 0 for r in drafting)

    def lag_part(self, req, seq_len: int) -> _Part:
        """The tokens [seen, seq_len] the draft cache lacks, root last, causal after prefix [0, seen)."""
        start = min(self.seen.get(req.rid, 0), seq_len)
        positions = list(range(start, seq_len + 1))
        tokens = _tokens(req)[start : seq_len + 1]
        return _Part(start, tokens, positions, positions, np.tril(np.ones((len(tokens),) * 2, dtype=bool)), True)

    def _grow(self, batch, drafting: list[DraftRequest]) -> None:
        """One more depth: run each frontier's paths (a chain's newest node alone: the nodes above it were run at
        their own positions by the forwards before, `_chain_part`), expand the frontier with the draft's next
        tokens."""
        parts, frontier_rows = [], []
        offset = 0
        for r in drafting:
            if self.topk == 1:
                parts.append(_chain_part(r))
                frontier_rows.append([offset])
                offset += 1
                continue
            nodes = r.tree.frontier_paths()
            index = {node: j for j, node in enumerate(nodes)}
            mask = np.zeros((len(nodes), len(nodes)), dtype=bool)
            for j, node in enumerate(nodes):
                for ancestor in r.tree.path(node):
                    mask[j, index[ancestor]] = True
            positions = [r.seq_len + r.tree.nodes[node].depth for node in nodes]
            slots = [r.seq_len + 1 + j for j in range(len(nodes))]  # a chain's node j+1 = its own position
            tokens = [r.tree.nodes[node].token for node in nodes]
            parts.append(_Part(r.seq_len + 1, tokens, positions, slots, mask))
            frontier_rows.append([offset + index[f] for f in r.tree.frontier])
            offset += len(nodes)
        rows_out = [row for rows in frontier_rows for row in rows]
        logits, hidden = self.forward(batch, drafting, parts, rows_out, hidden=self._wants_hidden(drafting))
        at, newest = 0, []
        for r, rows in zip(drafting, frontier_rows, strict=True):
            logprobs = torch.log_softmax(logits[at : at + len(rows)].float(), dim=-1)
            r.tree.expand(logprobs)
            newest.append(logprobs[0])  # a chain's one row (stops apply to chains only, so `hidden` aligns)
            at += len(rows)
        stop_unlikely(drafting, newest, hidden, self.head)

    def forward(self, batch, drafting: list[DraftRequest], parts: list[_Part], logit_rows: list[int], hidden=False):
        """One forward of the draft model over the drafting requests' parts (the direct one, draft_forward.py, or a
        TARGET_VERIFY forward through SGLang's runner); the logits of `logit_rows` (indices into the parts' tokens
        laid end to end), [len(rows), V] (`SelectedLogits` on the runner's path), and with `hidden` the final hidden
        states there [len(rows), H] (None without, and on the runner's path)."""
        if self.direct is None:
            return self._runner_forward(batch, drafting, parts, logit_rows), None
        out = self.direct.logits(*direct_inputs(batch, drafting, parts, logit_rows), hidden=hidden)
        return out if hidden else (out, None)

    def _runner_forward(self, batch, drafting: list[DraftRequest], parts: list[_Part], logit_rows: list[int]):
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.speculative.ngram_info import NgramVerifyInput

        device = batch.device
        lens = [len(p.tokens) for p in parts]
        tokens = torch.as_tensor([t for p in parts for t in p.tokens], dtype=torch.int64, device=device)
        positions = torch.as_tensor([q for p in parts for q in p.positions], dtype=torch.int64, device=device)
        mask = torch.as_tensor(np.concatenate([p.mask.reshape(-1) for p in parts]), device=device)
        selected = torch.as_tensor(logit_rows, dtype=torch.int64, device=device)
        out_cache_loc = _slots(batch, drafting, parts)
        prefixes = [p.prefix for p in parts]
        spec = NgramVerifyInput(draft_token=tokens, custom_mask=mask, positions=positions, draft_token_num=max(lens))
        spec.ragged_verify_layout = verify_layout(lens, device)
        spec.logit_rows = selected
        view = _rows_view(batch, drafting, prefixes)
        view.forward_mode = ForwardMode.TARGET_VERIFY
        view.input_ids, view.spec_info = tokens, spec
        view.out_cache_loc = out_cache_loc
        logits = self.worker.forward_batch_generation(view, is_verify=True).logits_output.next_token_logits
        if not self.rows_selected:  # a draft model without SGLang's LogitsProcessor: every row came back
            logits = logits[selected]
        return logits


@dataclass(frozen=True)
class _Part:
    """One request's tokens in a draft forward."""

    prefix: int  # positions [0, prefix) are read from the draft cache
    tokens: list[int]
    positions: list[int]  # position of each token
    slot_positions: list[int]  # req_to_token column whose KV slot each token's draft KV is written to
    mask: np.ndarray  # [len, len] bool: token j sees token k (ancestors and itself)
    chain: bool = False  # the mask is the lower triangle: token j sees tokens 0..j (DirectDraft.logits' `chain`)


def _chain_part(r: DraftRequest) -> _Part:
    """A chain's frontier node at depth d alone, at position seq_len + d and that position's slot, after the root and
    nodes 1..d-1 in the draft cache (the catch-up and the grows before wrote them there). Running the whole path
    instead re-ran d - 1 tokens a depth: a chain's later forwards ran d tokens per request where one is new."""
    node = r.tree.frontier[0]
    at = r.seq_len + r.tree.nodes[node].depth
    return _Part(at, [r.tree.nodes[node].token], [at], [at], np.ones((1, 1), dtype=bool), True)


def _slots(batch, drafting: list[DraftRequest], parts: list[_Part]) -> torch.Tensor:
    """[T] int64: the draft KV slot of every token of the parts, laid end to end: one gather from the request-to-slot
    table at flat indices made on the host (a part is a few tokens: tensors of the pools and positions, a
    repeat_interleave and a two-index gather took ~0.15 ms of each draft forward in the engine, 3-4 per batch-1
    step, py-spy; 53 us against 23 alone, AVX2 EPYC)."""
    table = batch.req_to_token_pool.req_to_token
    pools, width = batch.req_pool_indices.tolist(), table.shape[1]
    flat = [pools[r.row] * width + s for r, p in zip(drafting, parts, strict=True) for s in p.slot_positions]
    return table.reshape(-1)[torch.as_tensor(flat, device=table.device)].to(torch.int64)


def direct_inputs(batch, drafting: list[DraftRequest], parts: list[_Part], logit_rows: list[int]) -> tuple:
    """DirectDraft.logits' arguments for a forward over the parts, every one built from the batch now (its fields
    are not read again: draft_thread.py runs the forward while the target's forward swaps them); the forward reads
    only the request-to-slot table's rows of these requests, which no forward of the step rewrites."""
    device = batch.device
    rows = torch.as_tensor([r.row for r in drafting], device=device)
    return (
        torch.as_tensor([t for p in parts for t in p.tokens], dtype=torch.int64, device=device),
        torch.as_tensor([q for p in parts for q in p.positions], dtype=torch.int64, device=device),
        _slots(batch, drafting, parts),
        batch.req_to_token_pool.req_to_token,
        batch.req_pool_indices[rows].clone(),
        [p.prefix for p in parts],
        [len(p.tokens) for p in parts],
        torch.as_tensor(np.concatenate([p.mask.reshape(-1) for p in parts]), device=device),
        torch.as_tensor(logit_rows, dtype=torch.int64, device=device),
        all(p.chain for p in parts),
    )


class SelectedLogits(torch.nn.Module):
    """The draft model's LogitsProcessor, computing the lm_head only over the rows a draft forward asks for
    (`logit_rows` on its spec_info). SGLang selects rows that way only in DRAFT_EXTEND_V2 mode
    (LogitsMetadata.draft_extend_select_index); our draft forwards are TARGET_VERIFY (ragged, tree masks) and
    need few of their rows: a first draft over a 131-token context used 1 row of the 131 it computed. Measured in
    the engine (moe-fine's draft, Intel Xeon): a judgement of 8 such contexts 125 ms before, 47 ms with it; of one,
    15-18 ms before, 11-12 ms with it."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    @classmethod
    def install(cls, model) -> bool:
        """Wrap `model.logits_processor` (once); False where the model has none of SGLang's."""
        from sglang.srt.layers.logits_processor import LogitsProcessor

        inner = getattr(model, "logits_processor", None)
        if isinstance(inner, cls):
            return True
        if not isinstance(inner, LogitsProcessor):
            return False
        model.logits_processor = cls(inner)
        return True

    def forward(self, input_ids, hidden_states, lm_head, logits_metadata, *args, **kwargs):
        from sglang.srt.layers.logits_processor import LogitsMetadata
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch

        rows = getattr(getattr(logits_metadata, "spec_info", None), "logit_rows", None)
        if rows is not None and isinstance(logits_metadata, ForwardBatch):
            metadata = LogitsMetadata.from_forward_batch(logits_metadata)
            metadata.draft_extend_select_index = rows
            logits_metadata = metadata
        return self.inner(input_ids, hidden_states, lm_head, logits_metadata, *args, **kwargs)


def _tokens(req) -> list[int]:
    """Prompt + output: the token at each position (the last one, the root, not yet in any KV cache)."""
    return list(req.origin_input_ids) + list(req.output_ids)


def seq_lens_of(batch) -> list[int]:
    lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens
    return [int(x) for x in lens.tolist()]


def _rows_view(batch, drafting: list[DraftRequest], prefix_lens: list[int]):
    """A shallow copy of the ScheduleBatch over the drafting requests, seq_lens = what the draft cache already holds.
    Only the per-request fields a verify-mode forward reads are narrowed; no sampling happens in it."""
    rows = [r.row for r in drafting]
    index = torch.as_tensor(rows, device=batch.device)
    view = copy.copy(batch)
    view.reqs = [batch.reqs[i] for i in rows]
    view.req_pool_indices = batch.req_pool_indices[index]
    view.seq_lens = torch.as_tensor(prefix_lens, dtype=batch.seq_lens.dtype, device=batch.device)
    view.seq_lens_cpu = torch.as_tensor(prefix_lens, dtype=batch.seq_lens.dtype)
    view.seq_lens_sum = sum(prefix_lens)
    if batch.orig_seq_lens is not None:
        view.orig_seq_lens = batch.orig_seq_lens[index]
    if isinstance(batch.multimodal_inputs, list):
        view.multimodal_inputs = [batch.multimodal_inputs[i] for i in rows]
    view.return_logprob, view.top_logprobs_nums, view.token_ids_logprobs = False, None, None
    return view
