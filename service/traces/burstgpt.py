"""BurstGPT CSV traces, both layouts (shared/traces/README.md):

- files 1-2: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`
- file 3:    `Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type`

`Timestamp` is seconds (file 3 as floats, not zero-based); `Response tokens == 0` marks a failed request, kept here
with `output_tokens=0` so `schedule.failed_requests` can drop it or replay it as a 1-token request.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

from service.traces.types import Schedule, TraceRequest, blocks_for, private_blocks

log = logging.getLogger(__name__)

_LAYOUTS = {
    "without-sessions": ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"],
    "with-sessions": [
        "Timestamp",
        "Session ID",
        "Elapsed time",
        "Model",
        "Request tokens",
        "Response tokens",
        "Total tokens",
        "Log Type",
    ],
}


def load_burstgpt(path: str | Path, models: frozenset[str] | None = None) -> Schedule:
    """Read a BurstGPT CSV of either layout; `models` keeps only rows of those models (e.g. {"ChatGPT"})."""
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = [c.strip() for c in next(reader, [])]
        layout = next((name for name, cols in _LAYOUTS.items() if cols == header), None)
        if layout is None:
            raise ValueError(f"{path}: header {header} is neither BurstGPT layout {list(_LAYOUTS.values())}")
        rows = []
        empty_prompts = 0
        for line_no, cells in enumerate(reader, start=2):
            if not cells:
                continue
            row = _parse_row(dict(zip(header, cells, strict=False)), len(cells), len(header), f"{path}:{line_no}")
            if models is not None and row["model"] not in models:
                continue
            if row["input"] == 0:
                empty_prompts += 1
                continue
            rows.append(row)
    if empty_prompts:
        # A 0-token prompt cannot be sent to an OpenAI-style endpoint; say how many were left out.
        log.warning("%s: skipped %d rows with 0 request tokens", path, empty_prompts)
    if not rows:
        raise ValueError(f"{path}: no requests")
    rows.sort(key=lambda row: row["t"])
    t0 = rows[0]["t"]
    requests = []
    next_block = 0
    for row in rows:
        requests.append(
            TraceRequest(
                arrival_s=row["t"] - t0,
                input_tokens=row["input"],
                output_tokens=row["output"],
                prefix_blocks=private_blocks(next_block, row["input"]),
                session=row["session"],
            )
        )
        next_block += blocks_for(row["input"])
    return Schedule(requests=tuple(requests), source=f"burstgpt:{path.name}")


def _parse_row(row: dict[str, str], n_cells: int, n_header: int, where: str) -> dict:
    if n_cells != n_header:
        raise ValueError(f"{where}: expected {n_header} columns, got {n_cells}")
    try:
        t = float(row["Timestamp"])
        n_in = int(row["Request tokens"])
        n_out = int(row["Response tokens"])
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if n_in < 0 or n_out < 0 or t < 0:
        raise ValueError(f"{where}: negative timestamp or token count")
    session = row.get("Session ID")
    return {"t": t, "input": n_in, "output": n_out, "model": row["Model"], "session": session or None}
