"""Scratch (76th session): split py-spy raw stacks (pyspy_draft.py) of the samples inside DraftModelDrafter.draft by
the first frame below it that matches one of PARTS (in order), and inside DirectDraft._op_logits by its callee.
Also the share of the verify's target forward (`_verify_forward`) spent under the decode_moe op (expert products).
usage: python classify.py K.raw.gz"""

import collections
import gzip
import re
import sys

counts, inner, total, in_draft = collections.Counter(), collections.Counter(), 0, 0
verify, in_moe = 0, 0
with gzip.open(sys.argv[1], "rt") as f:
    lines = f.read().splitlines()
for line in lines:
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n)
    total += n
    frames = stack.split(";")
    if any(f.startswith("_verify_forward ") for f in frames):
        verify += n
        in_moe += n if any(f.startswith("decode_moe ") for f in frames) else 0
    idx = next((i for i, f in enumerate(frames) if f.startswith("DraftModelDrafter.draft ")), None)
    if idx is None:
        continue
    in_draft += n
    below = [re.sub(r" \(.*", "", f) + " " + re.sub(r".*\((.*):\d+\)", r"\1", f) for f in frames[idx + 1 :]]
    counts[" > ".join(f.split(" ")[0] for f in below[:3])] += n
    j = next((i for i, f in enumerate(below) if f.startswith("DirectDraft._op_logits")), None)
    if j is not None:
        inner[
            (below[j + 1].split(" ")[0] if j + 1 < len(below) else "(self)")
            + " line "
            + re.sub(r".*:(\d+)\)", r"\1", frames[idx + 1 + j])
        ] += n
print(f"samples {total}, inside draft {in_draft} ({in_draft / total:.1%})")
for k, v in counts.most_common(25):
    print(f"{v:6d} {v / in_draft:6.1%}  {k}")
print("inside _op_logits, by callee and the line it was called from:")
for k, v in inner.most_common(15):
    print(f"{v:6d} {v / in_draft:6.1%}  {k}")
print(f"verify forward: {verify} samples ({verify / total:.1%}), under decode_moe {in_moe / verify:.1%}")
