import sys, time, statistics, torch, dataclasses
sys.path.insert(0, '/work/main'); sys.argv=['x']
exec(open('/tmp/db/draftbench.py').read().split("variants={")[0])
old=build(torch.float32)
new=dataclasses.replace(build(torch.float32),attention_op=True).narrowed()
print('narrow', new.narrow is not None)
for T,prefix in ((1,100),(1,100),(4,100),(8,100)):
    fo,fn=call(old,T,prefix),call(new,T,prefix)
    a,b=fo(),fn(); 
    for cold in (False,True):
        ro,rn=[],[]
        for r in range(5):
            ro.append(timeit(fo,100,cold)); rn.append(timeit(fn,100,cold))
        print(T,prefix,'cold' if cold else 'warm','old',round(statistics.median(ro),3),'new',round(statistics.median(rn),3))
