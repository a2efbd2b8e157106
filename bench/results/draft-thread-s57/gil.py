"""Scratch (57th session): whether our stream op and F.linear release the GIL: a pure-Python spinner thread counts
while the main thread runs 5 calls of each (about as long as 5 sleeps of 10 ms); a held GIL would stop it.
usage: PYTHONPATH=. python gil.py > gil.txt"""

import threading
import time

import torch

from service.kernels import stream_gemm

torch.set_num_threads(1)
stream_gemm.load()
isa = torch.ops.moe_serve.stream_best_isa()
w = torch.randn(4608 * 48, 256).to(torch.bfloat16)
x = torch.randn(1, 256)
wf = torch.randn(4608 * 24, 256)


def spin(stop, out):
    n = 0
    while not stop.is_set():
        n += 1
    out.append(n)


for name, fn in [
    ("stream_linear", lambda: torch.ops.moe_serve.stream_linear(x, w, isa, 0)),
    ("F.linear", lambda: torch.nn.functional.linear(x, wf)),
    ("sleep", lambda: time.sleep(0.01)),
]:
    fn()
    stop = threading.Event()
    out = []
    th = threading.Thread(target=spin, args=(stop, out))
    th.start()
    time.sleep(0.01)
    t = time.perf_counter()
    n0 = None
    for _ in range(5):
        fn()
    dt = time.perf_counter() - t
    stop.set()
    th.join()
    print(name, f"{dt * 1e3 / 5:.2f} ms per call, spinner iters {out[0]}")
