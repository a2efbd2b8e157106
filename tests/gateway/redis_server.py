"""A private redis-server for outage tests and benches: started on a free loopback port, stopped, paused and restarted
at will. Never the machine's shared Redis on 6379 (other users depend on it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """One redis-server process. `persistent`: an append-only file (fsync always) in a private folder, so a restart
    keeps the buckets, as a production Redis with persistence would; otherwise a restart comes back empty."""

    def __init__(self, *, persistent: bool = False, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.persistent = persistent
        self._dir = Path(tempfile.mkdtemp(prefix="moe-serve-redis-"))
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        argv = [redis_server_binary() or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self._dir), "--save", "", "--daemonize", "no", "--protected-mode", "yes"]  # fmt: skip
        argv += ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if redis.Redis(port=self.port, socket_connect_timeout=0.2).ping():
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout_s} s")

    def stop(self) -> None:
        """SIGTERM and wait: connections are refused from now on (with persistence the data is on disk)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: connections open but nothing answers, so calls time out; commands sent meanwhile run on resume."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
