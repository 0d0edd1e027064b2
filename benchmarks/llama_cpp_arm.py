"""llama.cpp through llama-cpp-python on our model exported to GGUF: the same prompts, greedy, one sequence."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path


class LlamaCppArm:
    """Prefill and batch-1 greedy decode timings of llama.cpp at a given thread count (one Llama per count)."""

    def __init__(self, model: str, ctx: int):
        import llama_cpp  # noqa: F401  (raises ModuleNotFoundError when the optional dependency is absent)
        from strata_engine.model.gguf_export import export_gguf

        self.dir = tempfile.TemporaryDirectory(prefix="bench-model-gguf-")
        self.gguf = export_gguf(model, Path(self.dir.name) / "model.gguf", "f32")
        self.ctx, self.llms = ctx, {}

    def llm(self, threads: int):
        if threads not in self.llms:
            import llama_cpp

            self.llms[threads] = llama_cpp.Llama(str(self.gguf), n_ctx=self.ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                                                 n_threads_batch=threads, logits_all=False, verbose=False)
        return self.llms[threads]

    def prefill_seconds(self, threads: int, prompt: list[int]) -> float:
        llm = self.llm(threads)
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        return time.perf_counter() - start

    def decode_seconds(self, threads: int, prompt: list[int], steps: int) -> tuple[float, list[int]]:
        """Read the prompt (untimed), then `steps` greedy tokens, each argmax of the last logits row."""
        import numpy as np

        llm = self.llm(threads)
        llm.reset()
        llm.eval(prompt)
        vocab, tokens = llm.n_vocab(), []

        def greedy() -> int:
            return int(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,)).argmax())

        token = greedy()
        start = time.perf_counter()
        for _ in range(steps):
            tokens.append(token)
            llm.eval([token])
            token = greedy()
        return time.perf_counter() - start, tokens

    def close(self) -> None:
        for llm in self.llms.values():
            llm.close()
        self.dir.cleanup()
