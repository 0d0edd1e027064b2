"""Fixtures every suite shares: llama.cpp's `llama-server` and the embedded model as GGUF, and vLLM's own
server on the embedded model, for the tests against engines this project did not write (bench and verify
alike); and thread stages for `auto`."""

from __future__ import annotations

import os

import pytest

# `--stage-workers auto` puts 2-stage, 2-group CPU engines on torch.distributed stage ranks, which take ~3 s
# more to start and stop than threads (benchmarks/bench_ring.py); the suite starts many small engines, so auto means threads here
# (inherited by the engines tests start as subprocesses). The ranks have tests of their own
# (tests/engine/test_dist_*.py, explicit `stage_workers="dist"`), and CI's gate after the suite runs the
# default engine on them.
os.environ.setdefault("STRATA_STAGE_WORKERS", "thread")
# `strata-engine serve --layout auto` (the default) lays a multi-core CPU engine out as the fastest layout: two
# stages, the compiled step (~10 s of compiling at start) and the mixed read. The suite's many small servers
# keep the flags they name (plain); the layout has tests of its own (tests/engine/test_layout.py, with an
# explicit env), and CI's gate after the suite runs the default engine in it.
os.environ.setdefault("STRATA_LAYOUT", "plain")
# MKL's reproducible mode before any test's first GEMM, as a loaded model asks for it (strata_engine/mkl_mode.py):
# many tests multiply tensors before they load a model in the same worker.
from strata_engine.mkl_mode import pin  # noqa: E402

pin()

LLAMA_INSTALL = "run `bash scripts/install_llama_cpp.sh` to build it"


@pytest.fixture(scope="session")
def llama_gguf(tmp_path_factory):
    """(llama-server binary, GGUF of strata-tiny-moe); skips, naming the install command, where either is missing."""
    from strata_bench.engines.llama_cpp import find_llama_server

    binary = find_llama_server()
    if binary is None:
        pytest.skip(f"llama.cpp's llama-server is not built: {LLAMA_INSTALL}")
    pytest.importorskip("gguf", reason=f"the gguf package is missing: {LLAMA_INSTALL}")
    from strata_engine.model.gguf_export import export_gguf

    return binary, export_gguf("strata-tiny-moe", tmp_path_factory.mktemp("gguf") / "strata-tiny-moe.gguf")


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """URL of vLLM's OpenAI server (its CPU build) serving the embedded model, started once for the session
    (about 30 s, or minutes on a loaded machine); skips, naming the install command, where vLLM is missing."""
    from strata_bench.engines.launcher import EngineProcess
    from strata_bench.engines.vllm import INSTALL, find_vllm, server_command
    from strata_engine.model import resolve_model_path

    vllm = find_vllm()
    if vllm is None:
        pytest.skip(f"vLLM is not installed: {INSTALL}")
    command = server_command(vllm, resolve_model_path("strata-tiny-moe"), max_model_len=8192, max_num_seqs=8)
    log = tmp_path_factory.mktemp("vllm") / "vllm"
    with EngineProcess(command, name="vllm", log_stem=log, start_timeout=600) as server:
        yield server.url


SHARED_SERVERS = ("vllm_server", "llama_gguf")  # session fixtures: with pytest-xdist, one worker holds each


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The tests on vLLM's server carry the `vllm` mark and run last, together: `.ci/run` runs them alone after
    the other slow tests (`-m "slow and vllm"`, one process). vLLM's CPU build spins its OpenMP threads, and
    beside another engine's test on two cores a 13-token prompt waited 8-33 s for its first token, so the
    interleave checks saw A and B end before C's read. Under `-n N --dist loadgroup` the tests of each shared
    server go to one worker, so it starts once. `tryfirst`: xdist's worker reads the groups in its own hook of
    this name, which otherwise runs first and finds none; tests/test_shared_servers.py checks the groups hold."""
    items.sort(key=lambda item: "vllm_server" in getattr(item, "fixturenames", ()))
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "vllm_server" in names:
            item.add_marker(pytest.mark.vllm)
        for name in SHARED_SERVERS:
            if name in names:
                item.add_marker(pytest.mark.xdist_group(name))
                break
