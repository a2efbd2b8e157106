"""Scratch (65th session): the STANDALONE batch-8 waves of a step-logged bench.policies run (k0 and moe-serve, run by
../prose-b1-s55/run_logged.py): a wave is a run of consecutive steps over one set of >= 5 requests; it is moe-serve's
where any step rested, judged or speculated (k0's requests are capped at K = 0 by their hints: none of that). Per
wave: steps, wall time from its first step's start to its last step's end, the steps' own time, speculative steps,
the judging forwards' time (beside the step on the draft thread, and what the step waited for), the draft and
verify time of its speculative steps, and the drafts judged / accepted.
Usage: python waves.py STEPS.jsonl[.gz]"""

import gzip
import json
import statistics
import sys


def _lines(path: str) -> list[dict]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        return [json.loads(line) for line in f]


def waves(steps: list[dict]) -> list[list[dict]]:
    out: list[list[dict]] = []
    for s in steps:
        if len(s["rids"]) < 5:
            continue
        if out and set(s["rids"]) <= set(out[-1][0]["rids"]) and s["start"] - out[-1][-1]["end"] < 1.0:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def main(path: str) -> None:
    rows: dict[str, list[dict]] = {"k0": [], "moe-serve": []}
    for w in waves(_lines(path)):
        mine = any(s["resting"] or s["shadow"] or not s["plain"] or s["judge_beside_ms"] for s in w)
        rows["moe-serve" if mine else "k0"].append(
            {
                "steps": len(w),
                "wall_s": w[-1]["end"] - w[0]["start"],
                "in_steps_s": sum(s["end"] - s["start"] for s in w),
                "spec_steps": sum(not s["plain"] for s in w),
                "judge_beside_s": sum(s["judge_beside_ms"] for s in w) / 1e3,
                "judge_waited_s": sum(s["judge_ms"] for s in w) / 1e3,
                "draft_s": sum(s["draft_ms"] for s in w) / 1e3,
                "verify_s": sum(s["verify_ms"] for s in w if not s["plain"]) / 1e3,
                "judged": sum(x[0] for s in w for x in s["shadow"]),
                "accepted": sum(x[1] for s in w for x in s["shadow"]),
            }
        )
    keys = ["steps", "wall_s", "in_steps_s", "spec_steps", "judge_beside_s", "judge_waited_s", "draft_s", "verify_s"]
    print("policy     wave  " + "  ".join(keys) + "  judged/accepted")
    for policy, ws in rows.items():
        for i, w in enumerate(ws):
            cells = "  ".join(f"{w[k]:>{len(k)}.3f}" if isinstance(w[k], float) else f"{w[k]:>{len(k)}}" for k in keys)
            print(f"{policy:<9} {i:>5}  {cells}  {w['judged']}/{w['accepted']}")
        if ws:
            print(f"{policy:<9} median wall {statistics.median(w['wall_s'] for w in ws):.3f} s over {len(ws)} waves")


if __name__ == "__main__":
    main(sys.argv[1])
