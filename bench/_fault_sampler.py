"""The gateway's view during a fault run, sampled every `period_s`: replica health and load, the limits store, RSS
and CPU time of the gateway process (psutil), from its own /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families


class Sampler:
    def __init__(self, gateway, engine_urls: list[str], t0: float, period_s: float = 0.25) -> None:
        self.gateway = gateway
        self.engine_urls = engine_urls
        self.t0 = t0  # perf_counter seconds of the replay's time 0
        self.period_s = period_s
        self.samples: list[dict] = []
        self._process = psutil.Process(gateway.proc.pid)
        self._stopped = asyncio.Event()

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=5) as client:
            while not self._stopped.is_set():
                await self._sample(client)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), self.period_s)

    async def _sample(self, client: httpx.AsyncClient) -> None:
        sample = {"t_s": time.perf_counter() - self.t0}
        memory, cpu = self._process.memory_info(), self._process.cpu_times()
        sample["rss_mb"] = memory.rss / 2**20
        sample["cpu_s"] = cpu.user + cpu.system
        try:
            text = (await client.get(self.gateway.url + "/metrics")).text
        except httpx.HTTPError:
            self.samples.append(sample)
            return
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "moe_serve:engine_replica_healthy":
                    sample[f"healthy:{self.engine_urls.index(s.labels['replica'])}"] = s.value
                elif s.name == "moe_serve:engine_replica_outstanding":
                    sample[f"outstanding:{self.engine_urls.index(s.labels['replica'])}"] = s.value
                elif s.name in ("moe_serve:limits_store_up", "moe_serve:limits_pending_settlements"):
                    sample[s.name.split(":")[1]] = s.value
        self.samples.append(sample)
