"""Scratch (73rd session): the bfloat16 bytes of moe-fine x48's experts (all, one expert's, a batch-1 decode step's
top-k hits over every layer) from its checkpoint's tensor shapes, for this folder's README.
usage: python expert_bytes.py [CHECKPOINT_DIR] (default build/bench-models/moe-fine-x48) > expert_bytes.txt"""

import json
import sys
from pathlib import Path

from safetensors import safe_open

root = Path(sys.argv[1] if len(sys.argv) > 1 else "build/bench-models/moe-fine-x48")
config = json.loads((root / "config.json").read_text())
experts = 0
for path in sorted(root.glob("*.safetensors")):
    with safe_open(path, "pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not iterable)
            if "experts" in name:
                count = 1
                for d in f.get_slice(name).get_shape():
                    count *= d
                experts += count
layers, per_layer, top_k = config["num_hidden_layers"], config["num_local_experts"], config["num_experts_per_tok"]
one = experts * 2 / (layers * per_layer)
print(f"experts: {experts} parameters, {experts * 2 / 1e6:.0f} MB as bfloat16 ({layers} layers x {per_layer})")
print(f"one expert: {one / 1e6:.2f} MB; a batch-1 step's {layers * top_k} hits: {layers * top_k * one / 1e6:.0f} MB")
