"""Scratch (73rd session): while it runs, keep every SGLang scheduler process on core 0 and every other process of
this user on core 1, so that the engine's forwards share their core with nothing (the benchmark client, SGLang's
tokenizer and detokenizer processes all on the other core); at the end, every process back on every core (a shell
left on core 1 passes its mask to all it starts later).
usage: python pin.py SECONDS"""

import os
import sys
import time

import psutil

end = time.monotonic() + float(sys.argv[1])
seen: dict[int, str] = {}
while time.monotonic() < end:
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if not p.info["cmdline"]:
                continue  # kernel threads
            name = " ".join(p.info["cmdline"])
            want = {0} if "scheduler" in (p.info["name"] or "") or "sglang::scheduler" in name else {1}
            if p.pid == os.getpid() or p.pid == 1:
                continue
            for t in p.threads():
                if set(os.sched_getaffinity(t.id)) != want:
                    os.sched_setaffinity(t.id, want)
            if p.pid not in seen:
                seen[p.pid] = f"{sorted(want)} {(p.info['name'] or '')[:40]}"
                print(p.pid, seen[p.pid], flush=True)
        except (psutil.Error, OSError):
            pass
    time.sleep(0.5)
every = set(range(os.cpu_count() or 1))
for p in psutil.process_iter():
    try:
        for t in p.threads():
            os.sched_setaffinity(t.id, every)
    except (psutil.Error, OSError):
        pass
