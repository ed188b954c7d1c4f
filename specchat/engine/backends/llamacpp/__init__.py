"""The llama.cpp backend: a GGUF target and its runner (llama_runner), the kernel verdicts behind exactness
(kernels), GPU offload and the builds it needs (offload, built)."""
