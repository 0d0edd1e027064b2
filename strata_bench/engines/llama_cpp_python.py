"""llama.cpp in this process through llama-cpp-python (an optional dependency), on a GGUF file.

Contract: `InProcessLlama(gguf, ctx)` holds one `llama_cpp.Llama` per thread count; `prefill_seconds`
reads a prompt of token ids from an empty cache; `greedy(prompt, steps, threads)` reads the prompt
(untimed), then takes `steps` tokens, each the argmax of the last logits row (no sampler: its
high-level API and server apply repeat_penalty 1.1 unless told 1.0), and returns the decode seconds and
the tokens. Importing this module needs nothing; constructing one raises ModuleNotFoundError naming the
package where it is not installed. The server form of llama.cpp is `llama_cpp.py`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

INSTALL = "CMAKE_ARGS='-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF' .venv/bin/pip install llama-cpp-python==0.3.36"


class InProcessLlama:
    def __init__(self, gguf: str | Path, ctx: int):
        try:
            import llama_cpp  # noqa: F401
        except ModuleNotFoundError:
            raise ModuleNotFoundError(f"llama-cpp-python is not installed ({INSTALL})", name="llama_cpp") from None
        self.gguf, self.ctx = str(gguf), ctx
        self._llms: dict[int, object] = {}

    def _llm(self, threads: int):
        if threads not in self._llms:
            import llama_cpp

            self._llms[threads] = llama_cpp.Llama(
                self.gguf,
                n_ctx=self.ctx,
                n_batch=512,
                n_ubatch=512,
                n_threads=threads,
                n_threads_batch=threads,
                logits_all=False,
                verbose=False,
            )
        return self._llms[threads]

    def prefill_seconds(self, prompt: Sequence[int], threads: int = 1) -> float:
        llm = self._llm(threads)
        llm.reset()
        start = time.perf_counter()
        llm.eval(list(prompt))
        return time.perf_counter() - start

    def greedy(self, prompt: Sequence[int], steps: int, threads: int = 1) -> tuple[float, list[int]]:
        import numpy as np

        llm = self._llm(threads)
        llm.reset()
        llm.eval(list(prompt))
        vocab, tokens = llm.n_vocab(), []

        def argmax() -> int:
            return int(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,)).argmax())

        token = argmax()
        start = time.perf_counter()
        for step in range(steps):
            tokens.append(token)
            if step + 1 < steps:
                llm.eval([token])
                token = argmax()
        return time.perf_counter() - start, tokens

    def close(self) -> None:
        for llm in self._llms.values():
            llm.close()
        self._llms = {}
