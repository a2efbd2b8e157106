"""A JSON-lines log of every decode step of a speculative engine (`EngineSettings.step_log`, MOE_SERVE_STEP_LOG):
what a developer reads to see where a request's time goes between and inside the scheduler's steps, without
temporary prints. One line per step as the policies see it (a plain burst's forwards are a line each), written by the
scheduler process when the step closes:

    start, end       perf_counter seconds of the step (CLOCK_MONOTONIC on Linux, one clock for every process of
                     the machine, so a client's perf_counter cuts the log by its requests' windows); the gap between
                     a step's end and the next one's start is the scheduler's own work, result processing and
                     streaming included
    rids             request ids in batch order
    k                the K each request's policy chose; verified / accepted: drafts verified and accepted
    plain            the target ran a plain decode (nobody verified a draft)
    draft_ms, verify_ms, other_ms   the step's time split as StepStats has it
    judge_ms         what the step waited for a judging forward (StepStats.judge_s); judge_beside_ms: that
                     forward's own time where it ran on the draft thread beside the step (draft_thread.py), else 0
    resting          requests resting this step (Decision.rest_until)
    shadow           drafts judged without a verify this step: [drafts judged, accepted] per ShadowOutcome
    depth            per request, drafts its lookup found when the policies were asked (NGRAM); [] where the
                     policies were asked without depths or not at all (STANDALONE, a plain burst's later forwards,
                     a batch in which nobody may draft)
Off by default; a line of a batch-8 step costs ~30 us (2000 writes timed in-process, AMD EPYC, 2026-11-29), ~14 us
with the depth and shadow lists on an Intel Xeon (the same timing, four judged drafts a line)."""

from __future__ import annotations

import json
from pathlib import Path


class StepLog:
    def __init__(self, path: str | Path) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - held for the scheduler's life, a line per step

    def write(self, step, stats, plan, verified: list[int], accepted: list[int]) -> None:
        line = {
            "start": round(step.started, 6),
            "end": round(stats.now, 6),
            "rids": list(step.rids),
            "k": list(plan.ks),
            "verified": list(verified),
            "accepted": list(accepted),
            "plain": stats.plain,
            "draft_ms": round(stats.draft_s * 1e3, 3),
            "judge_ms": round(stats.judge_s * 1e3, 3),
            "judge_beside_ms": round(step.judge_beside_s * 1e3, 3),
            "verify_ms": round(stats.verify_s * 1e3, 3),
            "other_ms": round(stats.other_s * 1e3, 3),
            "resting": sum(step.resting),
            "shadow": [[o.k, o.accepted] for o in stats.shadow],
            "depth": list(step.draft_depths),
        }
        self._file.write(json.dumps(line) + "\n")

    def close(self) -> None:
        self._file.close()


def read(path: str | Path) -> list[dict]:
    """The log's steps, in order."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
