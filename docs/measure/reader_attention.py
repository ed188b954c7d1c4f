"""The prompt reader's attention, with and without flash attention, on the embedded GGUF over a float16 cache (the
reader's), 2 threads, alternated twice: a 4,096-token prompt read in passes of 256, then passes of 1, 4, 15 and 64
tokens after it (a follow-up's message deep in a chat). llama.cpp's C API through llama-cpp-python, nothing of ours.
docs/performance.md, "A follow-up without flash attention"; prompt_reader.READ_FLASH_ATTN.

    .venv/bin/python docs/measure/reader_attention.py [MODEL.gguf]
"""

import sys
import time

import llama_cpp

from specchat.models.sources import embedded_model_file

TOKENS = [100 + (7919 * i) % 40000 for i in range(4200)]  # fixed ids: the same work on both sides
DEPTH, PASS, SHORT = 4096, 256, (1, 4, 15, 64)


def context(model, flash: bool):
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 8192, PASS, PASS
    params.n_threads = params.n_threads_batch = 2
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else \
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.type_k = params.type_v = 1  # GGML_TYPE_F16
    params.no_perf = True
    return llama_cpp.llama_init_from_model(model, params)


def decode(ctx, batch, tokens: list[int], position: int) -> None:
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, position + i, 1, False
        batch.seq_id[i][0] = 0
    if llama_cpp.llama_decode(ctx, batch) != 0:
        raise RuntimeError("llama_decode failed")


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else str(embedded_model_file())
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(path.encode(), llama_cpp.llama_model_default_params())
    batch = llama_cpp.llama_batch_init(PASS, 0, 1)
    contexts = {flash: context(model, flash) for flash in (True, False)}
    for round_ in range(2):
        for flash, ctx in contexts.items():
            memory = llama_cpp.llama_get_memory(ctx)
            llama_cpp.llama_memory_seq_rm(memory, 0, 0, -1)
            started = time.perf_counter()
            for start in range(0, DEPTH, PASS):
                decode(ctx, batch, TOKENS[start:start + PASS], start)
            read = time.perf_counter() - started
            short = []
            for n in SHORT:
                llama_cpp.llama_memory_seq_rm(memory, 0, DEPTH, -1)
                started = time.perf_counter()
                decode(ctx, batch, TOKENS[DEPTH:DEPTH + n], DEPTH)
                short.append(f"{n}: {(time.perf_counter() - started) * 1000:.0f} ms")
            print(f"round {round_ + 1}, flash attention {'on' if flash else 'off'}: {DEPTH} tokens read in "
                  f"{read:.2f} s; a pass after them of {', '.join(short)}", flush=True)


if __name__ == "__main__":
    main()
