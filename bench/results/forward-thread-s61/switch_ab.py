# scratch: off vs on at several switch intervals, one engine at a time, batch 1 and 8
import dataclasses, os, statistics, sys, json
from pathlib import Path
import transformers
from bench._heldout import heldout_documents
from bench._load import run_batch, served_model
from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings
model = Path("build/bench-models/moe-fine-x48")
tok = transformers.AutoTokenizer.from_pretrained(model)
docs = heldout_documents("prose", 4) + heldout_documents("python", 4)
prompts = [tok.decode(tok(d)["input_ids"][:96]) for d in docs[:8]]
variants = sys.argv[1].split(",")  # off | on:SWITCH
rounds = int(sys.argv[2])
from contextlib import ExitStack
res = {v: {1: [], 8: []} for v in variants}
with ExitStack() as st:
    urls = {}
    for v in variants:
        setting, _, sw = v.partition(":")
        if sw: os.environ["MOE_SERVE_SWITCH_S"] = sw
        cfg = bench_engine(model, SpeculationConfig(), 1, settings=dataclasses.replace(EngineSettings(), forward_thread=setting))
        urls[v] = st.enter_context(running_engine(cfg, log_path=Path(f"/tmp/ab2-{v}.log")))
    name = served_model(next(iter(urls.values())))
    for u in urls.values(): run_batch(u, name, prompts[:2], 16, 2)
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for v in order:
            for b in (1, 8):
                got = run_batch(urls[v], name, prompts[:4] if b == 1 else prompts, 64, b)
                res[v][b].append(got["tpot_ms"])
        print(r, {v: {b: round(x[b][-1], 2) for b in (1, 8)} for v, x in res.items()}, flush=True)
for v in variants:
    print(v, {b: (round(statistics.median(res[v][b]), 2), round(min(res[v][b]), 2), round(max(res[v][b]), 2)) for b in (1, 8)})
