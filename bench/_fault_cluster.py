"""The processes a fault bench runs and breaks: engine replicas, a private redis-server, one gateway, all on loopback.

Engines are either real CPU SGLang servers (`moe-serve engine`, the bundled model) or the SGLang engine TEST DOUBLE
(tests/gateway/engine_double.py) run as its own process, so a SIGKILL is a real crash either way. Each engine runs in
its own process group: a kill takes the whole engine (SGLang's scheduler and detokenizer children too), as an OOM kill
of its container would. Redis is a redis-server started here on a free port (never the machine's shared 6379).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.gateway.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=5).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout_s:.0f} s")


@dataclass
class Engine:
    """One engine replica on a fixed port: start, SIGKILL, start again on the same port."""

    argv: list[str]  # command (the port is in it)
    port: int
    log: Path
    ready_path: str  # GET path that answers 200 once it can generate
    start_timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> None:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                self.argv, cwd=ROOT, env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        wait_http(self.url + self.ready_path, self.proc, self.start_timeout_s)

    def kill(self) -> None:
        """SIGKILL to the engine's whole process group: no goodbye to open connections."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()


def double_engine(port: int, log: Path, token_delay_s: float, first_token_delay_s: float, max_running: int) -> Engine:
    argv = [sys.executable, "-m", "tests.gateway.engine_double", "--port", str(port), "--token-delay",
            str(token_delay_s), "--first-token-delay", str(first_token_delay_s), "--max-running", str(max_running),
            "--kv-tokens", str(64 * 1024)]  # fmt: skip
    return Engine(argv, port, log, "/health", 30.0)


def sglang_engine(port: int, log: Path, max_running: int, model: str | None) -> Engine:
    argv = [sys.executable, "-m", "service.cli", "engine", "--port", str(port), "--max-running-requests",
            str(max_running)] + (["--model", model] if model else [])  # fmt: skip
    # One torch thread per engine: two engines share 2 cores (bench/_common.add_engine_threads_argument's reason).
    return Engine(argv, port, log, "/health_generate", 600.0, env={"OMP_NUM_THREADS": "1"})


@dataclass
class Gateway:
    argv: list[str]
    port: int
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        wait_http(self.url + "/ready", self.proc, 60.0)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def gateway(engines: list[Engine], redis: RedisServer, tenants: Path, log: Path, extra: list[str]) -> Gateway:
    port = free_port()
    argv = [sys.executable, "-m", "service.cli", "gateway", "--tenants", str(tenants), "--port", str(port),
            "--redis-url", redis.url, "--redis-key-prefix", "faults", "--health-interval", "0.5",
            "--log-level", "warning", *extra]  # fmt: skip
    for engine in engines:
        argv += ["--engine-url", engine.url]
    return Gateway(argv, port, log)


@contextlib.contextmanager
def running(engines: list[Engine], redis: RedisServer, gw: Gateway):
    """Start everything (engines in parallel), stop everything on the way out, whatever happened."""
    try:
        redis.start()
        for engine in engines:
            engine.start(wait=False)
        for engine in engines:
            engine.wait_ready()
        gw.start()
        yield
    finally:
        gw.stop()
        for engine in engines:
            engine.stop()
        redis.close()
