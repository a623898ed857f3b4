"""Triton kernels: imported only where Triton is usable (a CUDA device, or ``TRITON_INTERPRET=1``)."""
