"""Plain-torch implementations of the sgl_kernel CPU ops SGLang 0.5.23 calls on its CPU speculative path (issue 2).

`sgl_cpu_ops.register_sgl_kernel_cpu_ops()` registers them under `torch.ops.sgl_kernel`; nothing here imports SGLang.
"""
