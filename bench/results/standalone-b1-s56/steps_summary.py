"""Per batch-1 request of a step log: steps, k sequence, accepted, time per token."""
import json, sys, collections
lines = [json.loads(l) for l in open(sys.argv[1])]
by = collections.OrderedDict()
for l in lines:
    if len(l["rids"]) != 1:
        continue
    by.setdefault(l["rids"][0], []).append(l)
plain = [l["end"] - l["start"] for ls in by.values() for l in ls if l["plain"]]
plain.sort()
print("plain step median ms", round(1e3 * plain[len(plain) // 2], 2) if plain else None, len(plain))
for rid, ls in by.items():
    toks = sum(1 + (l["accepted"][0] if l["accepted"] else 0) for l in ls)
    span = ls[-1]["end"] - ls[0]["start"]
    seq = "".join("." if l["plain"] else (f"{l['k'][0]}{l['accepted'][0] if l['accepted'] else '-'} ") for l in ls)
    judge = sum(l["judge_ms"] for l in ls)
    print(rid[:6], "steps", len(ls), "tokens", toks, "ms/token", round(1e3 * span / toks, 2), "judge_ms", round(judge, 1))
    print("   ", seq)
