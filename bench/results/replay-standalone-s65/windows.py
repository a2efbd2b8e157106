"""Scratch (65th session): where a replay's time went on the drafter engine, from run_logged.py's step log and
replay windows: per replay (trace order as run, policy from its hints), the decode steps' own time, the gaps
between them (prefills of arrivals and the scheduler's work), the longest gap, and what moe-serve's steps spent
judging, drafting and verifying. Usage: python windows.py STEPS.jsonl WINDOWS.jsonl"""

import gzip
import json
import statistics
import sys


def _steps(path: str) -> list[dict]:
    """A JSON-lines file (gzip where it ends in .gz)."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        return [json.loads(line) for line in f]


def main(steps_path: str, windows_path: str) -> None:
    """Per replay; judged/accepted: the drafts the engine judged without a verify (StepStats.shadow)."""
    steps = _steps(steps_path)
    windows = _steps(windows_path)
    print(
        "replay  policy     steps  step_s  gap_s  gaps>100ms  longest_gap_s  plain  judge_s  draft_s  verify_s  judged/accepted"
    )
    seen: dict[str, int] = {}
    for w in windows:
        hints = w["hints"] or {}
        policy = hints.get("policy", "none")
        if policy == "static" and hints.get("max_k") == 0:
            policy = "k0"
        mine = [s for s in steps if w["start"] <= s["start"] and s["end"] <= w["end"]]
        if not mine:
            continue
        seen[policy] = seen.get(policy, 0) + 1
        gaps = [b["start"] - a["end"] for a, b in zip(mine, mine[1:], strict=False)]
        print(
            f"{seen[policy]:>6}  {policy:<9} {len(mine):>6}  {sum(s['end'] - s['start'] for s in mine):6.2f}"
            f"  {sum(gaps):5.2f}  {sum(g > 0.1 for g in gaps):>10}  {max(gaps, default=0):13.2f}"
            f"  {sum(bool(s['plain']) for s in mine):>5}  {sum(s.get('judge_ms', 0) for s in mine) / 1e3:7.2f}"
            f"  {sum(s.get('draft_ms', 0) for s in mine) / 1e3:7.2f}  {sum(s.get('verify_ms', 0) for s in mine) / 1e3:8.2f}"
            f"  {sum(x[0] for s in mine for x in s['shadow'])}/{sum(x[1] for s in mine for x in s['shadow'])}"
        )
        small = [g for g in gaps if g <= 0.1]
        if small:
            print(f"        median gap <= 100 ms: {statistics.median(small) * 1e3:.2f} ms")


def per_request(steps_path: str, windows_path: str) -> None:
    """Per request of each replay: its decode window (its first step's start to its last step's end) split into the
    decode steps it took part in and the rest (stalls: the prefills of later arrivals, the scheduler's work)."""
    steps = _steps(steps_path)
    windows = _steps(windows_path)
    print(
        "\npolicy     requests  window_s(median)  in_steps_s(median)  stall_share(median, min-max)  stalled>20%"
        "  their stall_share(median)  stall share of all windows"
    )
    shares: dict[str, list[float]] = {}
    rows: dict[str, list[tuple[float, float]]] = {}
    for w in windows:
        hints = w["hints"] or {}
        policy = "k0" if hints.get("max_k") == 0 else hints.get("policy", "none")
        mine = [s for s in steps if w["start"] <= s["start"] and s["end"] <= w["end"]]
        for rid in {r for s in mine for r in s["rids"]}:
            own = [s for s in mine if rid in s["rids"]]
            window = own[-1]["end"] - own[0]["start"]
            busy = sum(s["end"] - s["start"] for s in own)
            rows.setdefault(policy, []).append((window, busy))
            shares.setdefault(policy, []).append(1 - busy / window)
    for policy, rs in rows.items():
        s = shares[policy]
        stalled = [x for x in s if x > 0.2]
        total = 1 - sum(r[1] for r in rs) / sum(r[0] for r in rs)
        print(
            f"{policy:<9} {len(rs):>9}  {statistics.median(r[0] for r in rs):16.3f}"
            f"  {statistics.median(r[1] for r in rs):18.3f}  {statistics.median(s):.2f} ({min(s):.2f}-{max(s):.2f})"
            f"           {len(stalled):>11}  {statistics.median(stalled) if stalled else 0:25.2f}  {total:.2f}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
    per_request(*sys.argv[1:3])
