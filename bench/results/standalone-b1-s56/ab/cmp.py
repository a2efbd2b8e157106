import json,sys
for name in sys.argv[1:]:
    d=json.load(open(f'bench/results/standalone-b1-s56/ab/{name}/policies.json'))
    cells={}
    for r in d['rows']:
        cells.setdefault((r['prompts'],r['batch']),{})[r['policy']]=(r['tpot_ms'],r['tpot_ms_min'],r['tpot_ms_max'])
    out=[]
    for c,v in sorted(cells.items()):
        n=v['none'][0]; m=v['moe-serve']
        out.append(f"{c[0][:4]}{c[1]} {m[0]/n:.3f} [{m[1]/n:.2f}-{m[2]/n:.2f}] ns {v['none-sync'][0]/n:.2f}")
    print(name.ljust(8), ' | '.join(out))
