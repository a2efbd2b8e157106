"""Reads sample.py's py-spy raw stacks (a stacks.raw, or its .gz) and prints the scheduler event loop's samples: the
share inside the model forward (a frame of `ModelRunner.forward`), the idle share (waiting in zmq or asleep), and the
inclusive share of the top functions over all of them (a function counted once per sample). Usage: python
summary.py STACKS [TOP]"""

import collections
import gzip
import sys
from pathlib import Path

path = Path(sys.argv[1])
top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
FORWARD = "ModelRunner.forward ("  # the model forward: SGLang's runner and the model
IDLE = ("poll (zmq", "sleep (", "recv_pyobj", "_poll")
total = forward = idle = 0
inclusive: collections.Counter = collections.Counter()
for line in text.splitlines():
    stack, _, count = line.rpartition(" ")
    n, frames = int(count), stack.split(";")
    if not any("event_loop" in f for f in frames):
        continue  # other threads
    total += n
    forward += n if any(f.startswith(FORWARD) for f in frames) else 0
    idle += n if any(f.startswith(IDLE) or "idle" in f for f in frames[-3:]) else 0
    names = (
        f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].split("/")[-1] + ")" if " (" in f else f
        for f in frames
    )
    for name in dict.fromkeys(names):
        inclusive[name] += n
print(f"event-loop samples {total}: model forward {forward / total:.1%}, idle {idle / total:.1%}")
for name, n in inclusive.most_common(top):
    print(f"{n / total:6.1%}  {name}")
