"""Triton kernels for the MoE path. Importing a module here imports triton: reach them through service.kernels.dispatch.

`triton.jit` decides at decoration time whether to interpret (TRITON_INTERPRET=1), so that variable must be set before the
first import of these modules; tests do it at the top of the test file.
"""
