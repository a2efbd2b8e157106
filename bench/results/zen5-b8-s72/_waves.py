"""A step log (moe_sglang/step_log.py, gzipped) read back for this folder's scripts: its rows, and the rows grouped
into waves (consecutive steps that share a request), as ../judge-root-s68/waves.py groups them."""

import gzip
import json


def rows(path: str) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def waves(steps: list[dict]) -> list[list[dict]]:
    out: list[tuple[set, list[dict]]] = []
    for r in steps:
        ids = set(r["rids"])
        if not out or not ids & out[-1][0]:
            out.append((set(), []))
        out[-1][0].update(ids)
        out[-1][1].append(r)
    return [w for _, w in out]
