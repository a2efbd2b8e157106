"""Tuned GEMM plans kept on disk per machine, so that every engine on a machine multiplies in the same forms.

`GemmPlan.tune` (small_gemm.py) times the forms of a product on the weights at an engine's first forward and keeps the
fastest per row count. On a small shared machine those timings are noisy: eight engines started one after the other on
moe-fine x48 (2-core AMD EPYC with AVX-512, 2026-11-28) tuned eight different plans, so a benchmark that compares two
engines compared two plans as well; and the timing is a start-up cost (x48, forked engines: start to first token 19.6 s
timed, 12.5 s read; bench/results/engine_start-x48). With the cache the first engine's plan (per weight shape, row
range, candidate forms) is written here and every later engine on the machine reads it; the key holds what the timing
depends on (CPU model and features, core count, torch threads and version, the stream kernel's build), so another
machine, or this one after an upgrade, times afresh. The same eight starts with one cached plan still decoded at
8.9-14.6 ms per token, in runs of neighbouring starts (scratch, no JSON): that spread is the shared machine's over
time, not the plans'. `moe-serve engine --gemm-plan tune` (EngineSettings.gemm_plan) times at every start, as before;
deleting the folder times once again.

Where: $MOE_SERVE_PLAN_DIR, else the checkout's build/gemm-plans/ (next to the stream kernel's build). A file that
cannot be read as a plan is tuned over and replaced; a folder that cannot be written is used read-only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
from pathlib import Path

import torch

logger = logging.getLogger(__name__)


def plan_dir() -> Path:
    root = os.environ.get("MOE_SERVE_PLAN_DIR")
    return Path(root) if root else Path(__file__).resolve().parents[2] / "build" / "gemm-plans"


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(extra: dict) -> str:
    """A short digest of what a form's timing depends on here, plus `extra` (the plan's own parameters)."""
    from service.kernels import stream_gemm

    facts = {
        "cpu": cpu_model(),
        "isa": stream_gemm.best_isa() if stream_gemm.available() else None,
        "kernel": stream_gemm.build_stamp() if stream_gemm.available() else None,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        **extra,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


_ENGINE: list[PlanCache | None] = [None]  # the engine process's cache, where it keeps plans (set by the plugin)


def engine_cache() -> PlanCache | None:
    """The cache a plan without its own uses (GemmPlan.tune; None: such plans are timed)."""
    return _ENGINE[0]


def set_engine_cache(cache: PlanCache | None) -> None:
    _ENGINE[0] = cache


class PlanCache:
    """Forms per row count of one weight shape, under a machine key, in one JSON file each."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or plan_dir()

    def _path(self, key: str, shape: tuple[int, int]) -> Path:
        return self.folder / f"{key}-{shape[0]}x{shape[1]}.json"

    def get(self, key: str, shape: tuple[int, int], rows: int) -> list[str] | None:
        """The cached forms for row counts 1..rows, or None (absent, unreadable, or for another row range)."""
        path = self._path(key, shape)
        try:
            forms = json.loads(path.read_text())["forms"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            logger.warning("GEMM plan %s unreadable (%s): tuning again", path, err)
            return None
        if not isinstance(forms, list) or len(forms) != rows or not all(isinstance(f, str) for f in forms):
            logger.warning("GEMM plan %s is not a plan for %d row counts: tuning again", path, rows)
            return None
        return forms

    def put(self, key: str, shape: tuple[int, int], forms: list[str]) -> None:
        """Write atomically (engines starting together may tune the same shape: the last rename wins, whole)."""
        path = self._path(key, shape)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.folder, suffix=".tmp", delete=False) as tmp:
                json.dump({"shape": list(shape), "forms": forms, "cpu": cpu_model()}, tmp)
            os.replace(tmp.name, path)
        except OSError as err:
            logger.warning("GEMM plan not kept in %s (%s): the next engine tunes again", self.folder, err)
