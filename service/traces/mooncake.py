"""Mooncake FAST'25 JSONL traces: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (512-token blocks).

Format facts: shared/traces/README.md. Equal hash ids are identical prompt blocks, which is what makes the trace's
prefix reuse replayable (issue 6, item 2).
"""

from __future__ import annotations

import json
from pathlib import Path

from service.traces.types import Schedule, TraceRequest, blocks_for

_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def load_mooncake(path: str | Path) -> Schedule:
    """Read a Mooncake JSONL trace; arrival times are rebased to the first request."""
    path = Path(path)
    rows: list[tuple[float, TraceRequest]] = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            rows.append(_parse_row(line, f"{path}:{line_no}"))
    rows.sort(key=lambda row: row[0])
    if not rows:
        raise ValueError(f"{path}: no requests")
    t0 = rows[0][0]
    requests = tuple(
        TraceRequest(
            arrival_s=(ms - t0) / 1000.0,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            prefix_blocks=r.prefix_blocks,
        )
        for ms, r in rows
    )
    return Schedule(requests=requests, source=f"mooncake:{path.name}")


def _parse_row(line: str, where: str) -> tuple[float, TraceRequest]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON: {e}") from None
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}")
    ms, n_in, n_out, ids = (obj[k] for k in _FIELDS)
    if not (isinstance(n_in, int) and isinstance(n_out, int) and n_in > 0 and n_out >= 0):
        raise ValueError(f"{where}: bad token counts input={n_in!r} output={n_out!r}")
    if not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
        raise ValueError(f"{where}: hash_ids must be a list of integers")
    # The invariant the prompt builder relies on: one id per 512-token block, the last one possibly short.
    if len(ids) != blocks_for(n_in):
        raise ValueError(f"{where}: {len(ids)} hash_ids for {n_in} input tokens (expected {blocks_for(n_in)})")
    return float(ms), TraceRequest(arrival_s=0.0, input_tokens=n_in, output_tokens=n_out, prefix_blocks=tuple(ids))
