import sys, time, statistics, torch
sys.path.insert(0, '/work/main')
torch.set_num_threads(1)
from safetensors.torch import load_file
from moe_sglang.draft_forward import DirectDraft, DraftLayer
from service.kernels.small_gemm import GemmPlan
import json
P='/work/main/service/models/assets/moe-fine-draft'
cfg=json.load(open(P+'/config.json')); W=load_file(P+'/model.safetensors')
W={k:v.float() for k,v in W.items()}
H=cfg['hidden_size']; nh=cfg['num_attention_heads']; D=cfg['head_dim']; L=cfg['num_hidden_layers']
slots=4096
class Pool:
    def __init__(s): s.k=[torch.zeros(slots,nh,D) for _ in range(L)]; s.v=[torch.zeros(slots,nh,D) for _ in range(L)]
    def get_key_buffer(s,i): return s.k[i]
    def get_value_buffer(s,i): return s.v[i]
pool=Pool()
def build(dtype, plan_tune=True):
    layers=[]
    for i in range(L):
        p=f'model.layers.{i}.'
        qkv=torch.cat([W[p+'self_attn.q_proj.weight'],W[p+'self_attn.k_proj.weight'],W[p+'self_attn.v_proj.weight']])
        gu=torch.cat([W[p+'mlp.gate_proj.weight'],W[p+'mlp.up_proj.weight']])
        cv=lambda t:t.to(dtype).contiguous()
        layers.append(DraftLayer(W[p+'input_layernorm.weight'],cv(qkv),cv(W[p+'self_attn.o_proj.weight']),W[p+'post_attention_layernorm.weight'],cv(gu),cv(W[p+'mlp.down_proj.weight']),i))
    inv=1.0/(10000**(torch.arange(0,D,2).float()/D)); t=torch.arange(256).float(); f=torch.outer(t,inv)
    cache=torch.cat([f.cos(),f.sin()],-1)
    lm=W['lm_head.weight'].to(dtype).contiguous()
    ws=[w for l in layers for w in (l.qkv,l.o,l.gate_up,l.down)]+[lm]
    plan=GemmPlan()
    if plan_tune: plan=plan.tune(ws, inputs=torch.float32 if dtype==torch.bfloat16 else None)
    return DirectDraft(W['model.embed_tokens.weight'],tuple(layers),W['model.norm.weight'],lm,cfg['vocab_size'],nh,nh,D,cfg['rms_norm_eps'],cache,lambda:pool,plan)
req_to_token=torch.arange(256*8,dtype=torch.int32).view(8,256)
def call(dd,T,prefix):
    toks=torch.randint(0,8000,(T,)); pos=torch.arange(prefix,prefix+T)
    loc=req_to_token[0,prefix:prefix+T].long()
    mask=torch.tril(torch.ones(T,T,dtype=torch.bool)).reshape(-1)
    return lambda: dd.logits(toks,pos,loc,req_to_token,torch.tensor([0]),[prefix],[T],mask,torch.tensor([T-1]))
evict=torch.empty(64*2**20//4)
def timeit(fn,n=200,cold=False):
    ts=[]
    for _ in range(n):
        if cold: evict.add_(1.0)
        t0=time.perf_counter(); fn(); ts.append(time.perf_counter()-t0)
    return statistics.median(ts)*1e3
variants={'f32':build(torch.float32),'bf16':build(torch.bfloat16)}
for name,dd in variants.items(): print(name, {k:v for k,v in list(dd.plan.forms.items())[:0]})
for T,prefix in ((1,100),(4,100)):
  for cold in (False,True):
    for r in range(2):
      print(T,prefix,'cold' if cold else 'warm',{n:round(timeit(call(dd,T,prefix),cold=cold),3) for n,dd in variants.items()})
# op count
from torch.profiler import profile
with profile() as prof: call(variants['f32'],1,100)()
ev=[e for e in prof.events() if e.cpu_parent is None]
print('top-level ops per forward',len(ev))
import collections
print(collections.Counter(e.name for e in ev).most_common(30))
fn=call(variants['f32'],1,100)
for _ in range(20): fn()
with profile() as prof:
    for _ in range(20): fn()
root=[e for e in prof.events() if e.name.startswith('step[DRAFT')]
kids=collections.Counter(); tt=collections.Counter()
for r in root:
    for c in r.cpu_children:
        kids[c.name]+=1; tt[c.name]+=c.cpu_time_total
print('children per forward',sum(kids.values())/len(root), 'forward us', sum(r.cpu_time_total for r in root)/len(root))
for k,v in tt.most_common(25): print(f'{v/len(root):8.1f} us {kids[k]/len(root):5.1f}x {k}')
from service.kernels import decode_attention
import torch.nn.functional as F
from moe_sglang.direct_layers import rms_norm
def op_logits(dd, token, pos, loc):
    h=dd.embed[token]; pool=dd.kv_pool(); plan=dd.plan
    seq=pos+1
    for l in dd.layers:
        h=decode_attention.decode_attention(h,l.input_norm,dd.eps,l.qkv,l.o,dd.cos_sin_cache,pos,pool.get_key_buffer(l.layer_id),pool.get_value_buffer(l.layer_id),loc,req_to_token,torch.tensor([0]),seq,dd.heads,dd.kv_heads,dd.head_dim**-0.5,plan.kinds(*l.qkv.shape),plan.kinds(*l.o.shape))
        gate,up=plan.mm(rms_norm(h,l.post_norm,dd.eps),l.gate_up).chunk(2,dim=-1)
        h=h+plan.mm(F.silu(gate)*up,l.down)
    return plan.mm(rms_norm(h,dd.norm,dd.eps),dd.lm_head)[:, :dd.vocab]
for name,dd in [('f32',variants['f32'])]:
    tok=torch.tensor([5]); pos=torch.tensor([100]); loc=req_to_token[0,100:101].long()
    ref=call(dd,1,100)
    a=dd.logits(tok,pos,loc,req_to_token,torch.tensor([0]),[100],[1],torch.ones(1,dtype=torch.bool),torch.tensor([0]))
    b=op_logits(dd,tok,pos,loc)
    print(name,'maxdiff',(a-b).abs().max().item())
    for r in range(3):
        print(name,'torch',round(timeit(lambda: dd.logits(tok,pos,loc,req_to_token,torch.tensor([0]),[100],[1],torch.ones(1,dtype=torch.bool),torch.tensor([0]))),3),'op',round(timeit(lambda: op_logits(dd,tok,pos,loc)),3))
