"""Stopping a draft chain where the target will likely reject it (DraftModelDrafter's stops, chains only).

After each draft forward, a request that asked for a stop checks its newest draft; where the check fails, its chain
ends at this depth and only the drafts above it are verified (none: the request decodes plainly in this step, its
root fed to the draft cache). At batch 1 a rejected draft costs a verify that touches experts for nothing (a K = 4
step with a rejected draft ~24 ms against a ~8 ms plain step on moe-fine x48), one more draft forward ~0.9 ms.

Two checks, in this order of preference:
    head    p(accept) < accept_stop, p the draft's acceptance head (service/models/accept_head.py: a logistic model
            over the draft's final hidden state and top-8 log-probabilities, stored beside the draft's checkpoint);
            used where the drafter has a head and the request asked for it (Decision.accept_stop > 0)
    margin  p_1 < draft_stop * p_2, p_1 and p_2 the draft's probabilities of its token and of its runner-up
            (Decision.draft_stop >= 1); a draft without a head, or a request without accept_stop
Over the bench's held-out prompts (moe-fine and its distilled draft) the margin's AUC for acceptance is 0.85 and the
head's 0.92 (bench/results/accept-head-s77); below a margin of 1.10 drafts were accepted 0.35 of the time, the
others 0.78-1.00 by decile (bench/results/oracle-s76).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from service.models.accept_head import AcceptHead


class Stoppable(Protocol):  # draft_model.DraftRequest
    stop: float  # margin ratio (0: none)
    accept_stop: float  # acceptance probability floor for the head (0: none)
    depth_cap: int
    kept: int | None
    tree: object


def stop_unlikely(drafting: list[Stoppable], logprobs, hidden: torch.Tensor | None, head: AcceptHead | None) -> None:
    """`logprobs[i]` [V]: the draft's log-probabilities that gave request i's newest draft (a tensor [R, V] or a list
    of rows), `hidden[i]` [H] its final hidden state (None where the forward did not keep it); requests whose newest
    draft fails their check stop at this depth with the drafts above it (module docstring)."""
    by_head = [i for i, r in enumerate(drafting) if r.accept_stop > 0.0 and head is not None and hidden is not None]
    chosen = set(by_head)
    by_margin = [i for i, r in enumerate(drafting) if r.stop > 0.0 and i not in chosen]
    if by_head:
        p = head.probability(torch.stack([logprobs[i] for i in by_head]), hidden[by_head]).tolist()
        for i, accept in zip(by_head, p, strict=True):
            if accept < drafting[i].accept_stop:
                _stop_here(drafting[i])
    if by_margin:
        top = torch.stack([logprobs[i] for i in by_margin]).topk(2, dim=-1).values.tolist()  # one top-2 for all
        for i, (first, second) in zip(by_margin, top, strict=True):
            if first - second < math.log(drafting[i].stop):
                _stop_here(drafting[i])


def _stop_here(r: Stoppable) -> None:
    r.depth_cap = r.tree.depth
    r.kept = r.depth_cap - 1
