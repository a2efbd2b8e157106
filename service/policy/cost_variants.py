"""The cost model's prediction variants: StepTimeModel priced as if something it has not measured (or measured on
other requests) were otherwise, for one decision. Each shares the model's measured rows (a shallow copy with a few
fields set), so none of them learns or refits; StepTimeModel takes them as methods (cost_model.py)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.policy.cost_model import StepTimeModel


def hoped(self: StepTimeModel) -> StepTimeModel:
    """This model, except that where the split affinity is not fitted an accepted draft is priced as the
    target's own next token routing with its predecessor (no fresh experts): what a probe hopes for (moe_serve's
    probe gate), optimistic so that speculation where drafts are accepted gets measured at all. For predictions
    only: it shares this model's measured rows."""
    return variant(self, _hope=True)


def reusing(self: StepTimeModel, fresh_accepted: float) -> StepTimeModel:
    """This model, except that an accepted draft is priced at `fresh_accepted` fresh routings: what the requests'
    own plain-decoded tokens measured (1 - the share of experts a token reuses from the one before, moe_serve's
    expert reuse), in place of the split fitted over every request of the bucket, whose accepted drafts route
    differently (on the CPU engine's moe-fine x48 at batch 1, code's accepted drafts 4 fresh experts per layer,
    prose's 0-1). For predictions only: it shares this model's measured rows."""
    return variant(self, _fresh_accepted=min(max(fresh_accepted, 0.0), 1.0))


def owning(self: StepTimeModel, ratio: float) -> StepTimeModel:
    """This model, except that its speculative steps are priced `ratio` times what it predicts (plain steps as
    they are): what one request's own speculative steps measured against this model's prices at batch 1, where
    a step is that request's alone (moe_serve_observe.own_ratio). Requests differ there by more than their
    expert reuse prices: on the CPU engine (STANDALONE, moe-fine x48, batch 1) a code request's one-draft steps
    took 55-60 ms, each priced at 50.4 ms, and it kept verifying one draft at p ~ 0.9, 1.08x the time a plain
    decode of its tokens took; a prose request's three-draft steps took 37-45 ms, priced at 56-68 ms from code
    steps (its accepted drafts routed to the experts of the token before them), and after one rejection it
    decoded plain at p ~ 0.7. A ratio below 1 never prices a speculative step under a plain one
    (`_plain_price`). For predictions only: it shares this model's measured rows."""
    return variant(self, _own_ratio=ratio)


def scouting(self: StepTimeModel) -> StepTimeModel:
    """This model, except that an uncalibrated bucket's speculative steps are priced by its plain ratio even below
    1, the optimistic end of their price (AMD EPYC, batch 8: ~1.17x the fit; Xeon with AMX tiles: eight four-draft
    NGRAM verifies 69-75 ms, the batch-1 fit 121, the plain ratio 0.62 gives 75): moe-serve's cost scout."""
    return variant(self, _scout=True)


def variant(self: StepTimeModel, **changes) -> StepTimeModel:
    """A shallow copy with `changes` set (the prediction variants above share this model's measured rows)."""
    out = copy.copy(self)
    out.__dict__.update(changes)
    return out
