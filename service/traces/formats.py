"""Pick a trace loader by name or by sniffing the file's first line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from service.traces.azure import load_azure
from service.traces.burstgpt import load_burstgpt
from service.traces.mooncake import load_mooncake
from service.traces.types import Schedule

LOADERS: dict[str, Callable[[Path], Schedule]] = {
    "mooncake": load_mooncake,
    "azure": load_azure,
    "burstgpt": load_burstgpt,
}


def detect_format(path: str | Path) -> str:
    with Path(path).open(encoding="utf-8", newline="") as f:
        first = f.readline().strip()
    if first.startswith("{"):
        return "mooncake"
    if first.startswith("TIMESTAMP,ContextTokens"):
        return "azure"
    if first.startswith("Timestamp,"):
        return "burstgpt"
    raise ValueError(f"{path}: cannot tell the trace format from its first line {first[:80]!r}")


def load_trace(path: str | Path, fmt: str = "auto") -> Schedule:
    """Load a trace file; `fmt` is one of LOADERS or "auto"."""
    name = detect_format(path) if fmt == "auto" else fmt
    if name not in LOADERS:
        raise ValueError(f"unknown trace format {fmt!r}; choose from auto, {', '.join(LOADERS)}")
    return LOADERS[name](Path(path))
