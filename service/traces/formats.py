"""Pick a trace loader by name or by sniffing the file's first line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from service.traces.arrivals import HEADER as ARRIVALS_HEADER
from service.traces.arrivals import Lengths, load_arrivals
from service.traces.azure import load_azure
from service.traces.burstgpt import load_burstgpt
from service.traces.mooncake import load_mooncake
from service.traces.types import Schedule

LOADERS: dict[str, Callable[[Path], Schedule]] = {
    "mooncake": load_mooncake,
    "azure": load_azure,
    "burstgpt": load_burstgpt,
}
FORMATS = (*LOADERS, "arrivals")  # arrivals: timestamps only, lengths given separately (arrivals.py)


def detect_format(path: str | Path) -> str:
    with Path(path).open(encoding="utf-8", newline="") as f:
        first = f.readline().strip()
    if first.startswith("{"):
        return "mooncake"
    if first.startswith("TIMESTAMP,ContextTokens"):
        return "azure"
    if first.strip('"') == ARRIVALS_HEADER:
        return "arrivals"
    if first.startswith("Timestamp,"):
        return "burstgpt"
    raise ValueError(f"{path}: cannot tell the trace format from its first line {first[:80]!r}")


def load_trace(
    path: str | Path, fmt: str = "auto", lengths: Lengths | None = None, arrival_unit_s: float = 1.0
) -> Schedule:
    """Load a trace file; `fmt` is one of FORMATS or "auto". An arrival-only trace needs `lengths`; a trace that
    records its own lengths refuses them (they would silently not apply)."""
    name = detect_format(path) if fmt == "auto" else fmt
    if name not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; choose from auto, {', '.join(FORMATS)}")
    if name == "arrivals":
        if lengths is None:
            raise ValueError(
                f"{path}: the trace has arrival times only; give request lengths "
                "(--lengths-from TRACE and/or --input-tokens N --output-tokens M)"
            )
        return load_arrivals(path, lengths, arrival_unit_s)
    if lengths is not None:
        raise ValueError(f"{path}: a {name} trace records its own request lengths; lengths are for arrival-only traces")
    return LOADERS[name](Path(path))
