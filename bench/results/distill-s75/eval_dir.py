"""kd.py's evaluation of exported drafts: usage eval_dir.py OUT.json NAME=DRAFT_DIR [NAME=DRAFT_DIR ...]."""

import json
import sys
from pathlib import Path

import torch
from kd import TARGET, eval_set, evaluate, load
from transformers import AutoModelForCausalLM

torch.set_num_threads(2)
sets = eval_set(load(TARGET))
result = {}
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    draft = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    result[name] = {"path": path, **evaluate(draft, sets)}
    print(name, json.dumps(result[name]), flush=True)
Path(sys.argv[1]).write_text(json.dumps(result, indent=1))
