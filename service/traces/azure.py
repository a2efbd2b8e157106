"""Azure LLM inference 2023 CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`.

Timestamps carry 7 fractional digits (100 ns ticks), which `datetime` cannot hold, so they are parsed to integer
ticks; files use CRLF and have no final newline (shared/traces/README.md). The trace records no prefix sharing, so every
request gets private prefix blocks.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from service.traces.types import Schedule, TraceRequest, blocks_for, private_blocks

_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
_TIMESTAMP = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(\d{1,7}))?$")
_TICKS_PER_S = 10_000_000


def load_azure(path: str | Path) -> Schedule:
    """Read an Azure 2023 trace; arrival times are rebased to the first request."""
    path = Path(path)
    # newline="" keeps the CR so splitlines() sees CRLF, LF and a missing final newline alike.
    with path.open(encoding="utf-8", newline="") as f:
        lines = f.read().splitlines()
    if not lines or [c.strip() for c in lines[0].split(",")] != _HEADER:
        raise ValueError(f"{path}: expected header {','.join(_HEADER)}")
    rows = [_parse_row(line, f"{path}:{n}") for n, line in enumerate(lines[1:], start=2) if line.strip()]
    if not rows:
        raise ValueError(f"{path}: no requests")
    rows.sort(key=lambda row: row[0])
    t0 = rows[0][0]
    requests = []
    next_block = 0
    for ticks, n_in, n_out in rows:
        requests.append(
            TraceRequest(
                arrival_s=(ticks - t0) / _TICKS_PER_S,
                input_tokens=n_in,
                output_tokens=n_out,
                prefix_blocks=private_blocks(next_block, n_in),
            )
        )
        next_block += blocks_for(n_in)
    return Schedule(requests=tuple(requests), source=f"azure:{path.name}")


def parse_ticks(text: str) -> int:
    """`2023-11-16 18:15:46.6805900` -> 100 ns ticks since the epoch (naive time, the trace's own clock)."""
    m = _TIMESTAMP.match(text.strip())
    if not m:
        raise ValueError(f"bad timestamp {text!r}")
    whole = datetime.fromisoformat(m.group(1))
    seconds = int((whole - datetime(1970, 1, 1)).total_seconds())
    fraction = (m.group(2) or "").ljust(7, "0")
    return seconds * _TICKS_PER_S + int(fraction)


def _parse_row(line: str, where: str) -> tuple[int, int, int]:
    cells = line.split(",")
    if len(cells) != 3:
        raise ValueError(f"{where}: expected 3 columns, got {len(cells)}")
    try:
        ticks = parse_ticks(cells[0])
        n_in, n_out = int(cells[1]), int(cells[2])
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if n_in <= 0 or n_out < 0:
        raise ValueError(f"{where}: bad token counts input={n_in} output={n_out}")
    return ticks, n_in, n_out
