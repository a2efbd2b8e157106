"""Start and stop an SGLang server process built from an EngineConfig (used by `moe-serve up`, tests and benches)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx

from moe_sglang.launch import EngineConfig, server_command


class EngineStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(
    url: str,
    proc: subprocess.Popen,
    timeout: float,
    log_path: Path | None,
    health: str = "/health_generate",
    name: str = "SGLang",
) -> None:
    """Until GET `health` answers 200; EngineStartError (with the log's tail) if the server exits or times out.
    `health`/`name` serve other OpenAI servers started the same way (the vLLM peer of the benches: /health)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EngineStartError(f"{name} server exited with {proc.returncode}{_log_tail(log_path)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}{health}", timeout=30).status_code == 200:
                return
        time.sleep(1.0)
    raise EngineStartError(f"{name} server not healthy after {timeout:.0f} s{_log_tail(log_path)}")


def check_cpu_backend(url: str, config: EngineConfig, log_path: Path | None) -> None:
    """On CPU our plugin must have kept the intel_amx backend; SGLang swallows plugin errors and falls back to
    torch_native, which would make every speculative request fail. Say so at start instead."""
    if config.resolved_device() != "cpu":
        return
    backend = httpx.get(f"{url}/server_info", timeout=30).json().get("attention_backend")
    if backend != "intel_amx":
        raise EngineStartError(
            f"attention backend is {backend!r}, not 'intel_amx': the moe-serve SGLang plugin did not load "
            f"(is moe-serve installed in this environment?){_log_tail(log_path)}"
        )


def _log_tail(log_path: Path | None, lines: int = 40) -> str:
    if log_path is None or not log_path.exists():
        return ""
    return "\n--- server log (tail) ---\n" + "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])


PORT_TAKEN = "address already in use"
PORT_TRIES = 3  # a free port picked for the server can be taken before SGLang binds it, tens of seconds later


@contextlib.contextmanager
def running_engine(config: EngineConfig, log_path: Path | None = None, timeout: float = 300) -> Iterator[str]:
    """Run the server until the block exits; yields its base URL. A port of 0 picks a free one, and another one when
    the server's log says it was taken meanwhile. The server's output goes to `log_path`, or to this process's
    stdout/stderr when None."""
    for attempt in range(1, PORT_TRIES + 1):
        chosen = replace(config, port=free_port()) if config.port == 0 else config
        proc, log = _start(chosen, log_path)
        url = f"http://{chosen.host}:{chosen.port}"
        try:
            try:
                wait_healthy(url, proc, timeout, log_path)
            except EngineStartError as err:
                if config.port == 0 and PORT_TAKEN in str(err).lower() and attempt < PORT_TRIES:
                    continue  # the finally below stops this attempt's processes
                raise
            check_cpu_backend(url, chosen, log_path)
            yield url
            return
        finally:
            _stop(proc)
            if log is not None:
                log.close()


def _start(config: EngineConfig, log_path: Path | None) -> tuple[subprocess.Popen, object]:
    argv, env = server_command(config)
    log = open(log_path, "w") if log_path else None  # noqa: SIM115 - closed by running_engine
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def _stop(proc: subprocess.Popen, grace: float = 20) -> None:
    # SGLang spawns scheduler/detokenizer children: signal the whole process group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
