"""Expert offloading with speculative lookahead (MoE-SpeQ, issue 10 parts 1-3).

The target's experts live in a memory-mapped safetensors file (the slow tier); a bounded resident set caches them
(expert_store); the INT4 self-draft's routing fills the Expert Lookahead Buffer (lookahead), which drives a background
prefetcher in three phases (prefetch) and lookahead-aware eviction (eviction); the governor picks the draft length from
measured fetch bandwidth and draft/verify times; runner ties them into a greedy speculative decode loop.
"""
