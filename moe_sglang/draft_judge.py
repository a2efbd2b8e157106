"""Judging a STANDALONE draft model without a verify (`judge`, asked by a policy through Decision.judge for a request
at K = 0; the drafter and its lazily caught-up draft cache: draft_model.py): the depth-1 forward alone, over the
tokens the draft cache lacks, root included, with no draft built. Its prediction at position s is the draft
token a chain rooted at s would have started with; where it equals the token the target emitted at s + 1, the next
prediction was made from the same context a draft chain would have had, so the run of matches from s is exactly what
a greedy verify of a chain drafted at s would have accepted. The emitted tokens are then replayed as speculation at
the full depth would have decoded them: a chain at the first output token, the next one at the token after its first
rejection (the target's correction) or after its full depth (the bonus), and so on, as NGRAM's unverified drafts are
walked one at a time (shadow.py); each chain becomes one ShadowOutcome (the policy's acceptance without a verify, at
the cost of one draft forward and no verify). Not a chain at every position: a token the draft cannot predict would
be counted as the rejection of every chain that reaches it (up to `max_depth` of them) where a verify meets it once:
in the CPU engine's prose cell (moe-fine x48, batch 1) a request judged at every position after 4 tokens read 3 of 7
positions accepted, its fourth token rejected by three chains, where static K = 3 accepted 2 of 3 drafts on its
first verify and 3 of 3 from its third on (the replay reads 2 of 3). The prompt's last token is no root either: the
target's prefill emits the first output token, so no chain ever predicts it (the first output token is often the
hardest: two of the three prose requests missed it). The draft cache is in step afterwards, so a request that then
speculates has no catch-up.

Judging the root: the judging forward runs over the root as well (its draft KV is written anyway), so it also
predicts the token after the root, which the target emits in this very step (the judged request is at K = 0). The
step's join hands over the tokens it emitted (`judge_later`'s `now`), and that prediction is judged with the others:
a judgement after n output tokens judges n predictions, not n - 1, the latest of them the step's own token, and the
policy sees the outcomes when that step closes (a first judgement after 2 tokens: 2 outcomes, where 1 had left a
request whose second output token the draft missed at p ~0.3).

Judging gated chains: where the request's chains stop by the acceptance head (Decision.accept_stop, draft_stop.py),
the judging forward keeps its hidden states and the replay ends each chain above its first draft the head doubts, as
the stop ends a verified one; a chain that keeps no draft is a plain step and no outcome. The policy then reads the
acceptance of the drafts it would verify, not of drafts the stop would have left out.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from moe_sglang.draft_model import DraftModelDrafter, DraftRequest, direct_inputs, seq_lens_of
from moe_sglang.draft_thread import AT_ONCE
from service.models.accept_head import AcceptHead
from service.policy import ShadowOutcome


def judge(drafter: DraftModelDrafter, batch, rows: list[int]) -> tuple[tuple[ShadowOutcome, ...], int]:
    """Judge the draft model of requests `rows` (at K = 0 this step) against their emitted tokens (module
    docstring); returns the outcomes and the tokens the draft model ran besides the roots (its catch-up, counted as
    DraftModelDrafter.backlogs counts it)."""
    return judge_later(drafter, batch, rows)()


def judge_later(
    drafter: DraftModelDrafter,
    batch,
    rows: list[int],
    beside: Callable = AT_ONCE,
    accept_stops: list[float] | None = None,
) -> Callable[..., tuple]:
    """`judge`, its draft forward run by `beside` (a draft_thread.Beside, or a function that wraps one) from
    inputs copied from the batch now; the returned join gives judge's value (and keeps the draft cache's state
    in step) on the caller's thread. The forward predicts at each request's root too (module docstring,
    judging the root): the join, given `now`, the token the step emitted after each batch row's root, judges
    that prediction as well (without it, as `judge`: the root's prediction unused). `accept_stops[i]`: batch
    row i's chains are replayed stopped where the acceptance head doubts a draft, as its verified chains
    would be (module docstring, judging gated chains; 0 or None: replayed to the full depth)."""
    # as the verified chains: trees (topk > 1) never stop, so their judgements replay ungated (DraftModelDrafter.gated)
    gated = drafter.gated and bool(accept_stops) and any(accept_stops[i] > 0 for i in rows)
    seq = seq_lens_of(batch)
    judged = [DraftRequest(i, seq[i], 0, None) for i in rows]
    parts, roots, logit_rows, offset = [], [], [], 0
    for r in judged:
        req = batch.reqs[r.row]
        part = drafter.lag_part(req, r.seq_len)  # tokens [start, seq_len]
        start = part.prefix
        # roots whose next token the target emitted: the outputs before the root (module docstring),
        # then the root, whose next token this step emits
        judged_roots = range(max(start, len(req.origin_input_ids)), r.seq_len)
        roots.append((req.rid, [part.tokens[s + 1 - start] for s in judged_roots]))
        logit_rows += [offset + s - start for s in judged_roots] + [offset + r.seq_len - start]
        parts.append(part)
        offset += len(part.tokens)
    if drafter.direct is not None:
        inputs = direct_inputs(batch, judged, parts, logit_rows)
        predicted = beside(lambda: predictions(drafter.direct.logits(*inputs, hidden=gated), drafter.head))
    else:  # SGLang's runner reads the batch and its runner's state: on this thread
        ran = predictions(drafter.forward(batch, judged, parts, logit_rows)[0], None)
        predicted = lambda: ran  # noqa: E731
    ran_tokens = sum(len(p.tokens) for p in parts) - len(judged)

    def outcomes(now: list[int] | None = None) -> tuple[tuple[ShadowOutcome, ...], int]:
        (tokens, accept), found, at = predicted(), [], 0
        for (rid, emitted), r in zip(roots, judged, strict=True):
            made = tokens[at : at + len(emitted) + 1]  # the emitted tokens' predictions, then the root's
            floor = accept_stops[r.row] if accept is not None else 0.0
            keeps = [q >= floor for q in accept[at : at + len(made)]] if floor > 0 else None
            at += len(made)
            truth = emitted if now is None else [*emitted, now[r.row]]
            hits = [p == t for p, t in zip(made[: len(truth)], truth, strict=True)]
            chains = replayed(hits, drafter.max_depth, keeps)
            found += [ShadowOutcome(rid, drafter.max_depth, k, a) for k, a in chains]
            drafter.seen[rid] = r.seq_len + 1  # the root's draft KV is written at its slot; it is committed now
        return tuple(found), ran_tokens

    return outcomes


def chain_outcome(hits: list[bool], depth: int) -> tuple[int, int]:
    """(positions judged, positions accepted) of a chain of `depth` drafts whose i-th draft matches iff hits[i];
    `hits` may end before `depth` (the tokens emitted so far): the chain is then judged as far as they reach."""
    accepted = 0
    for hit in hits[:depth]:
        if not hit:
            return accepted + 1, accepted
        accepted += 1
    return accepted, accepted


def replayed(hits: list[bool], depth: int, keeps: list[bool] | None = None) -> list[tuple[int, int]]:
    """(positions judged, positions accepted) of each chain speculation at `depth` would have verified along the
    emitted tokens, `hits[s]` whether the draft's prediction at root s matched (module docstring): a chain
    at the first root, each next one at the token after the previous chain's accepted run. With `keeps[s]` (the
    acceptance head's verdict on the prediction at s), a chain ends above its first draft the head doubts, as the
    stop ends a verified one (draft_stop.py); a chain that keeps no draft is a plain step, no outcome."""
    chains, root = [], 0
    while root < len(hits):
        ahead = min(depth, len(hits) - root)
        cap = depth if keeps is None else next((i for i in range(ahead) if not keeps[root + i]), depth)
        judged, accepted = chain_outcome(hits[root:], cap)
        if judged:
            chains.append((judged, accepted))
        root += accepted + 1
    return chains


def predictions(out, head: AcceptHead | None) -> tuple[list[int], list[float] | None]:
    """A judging forward's greedy tokens and, where it kept the hidden states (`out` = (logits, hidden)), the
    acceptance head's probability of each."""
    if not isinstance(out, tuple):
        return out.argmax(dim=-1).tolist(), None
    logits, hidden = out
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return logprobs.argmax(dim=-1).tolist(), head.probability(logprobs, hidden).tolist()
