"""How the docs test checks each documented command (doc_commands.py reads them out of the docs): four kinds
of check, and the rewrites and reasons the tables of checks share. Each command's check is in
reference_checks.py when README.md or a docs/*.md page shows it, else in a *_measurement_checks.py module
(a page of docs/measurements/; measurement_checks.py merges them). A command in the docs with no check
fails the fast test, so the docs and their checks cannot drift.

- `Run(rewrite)`: run it with bash in a scratch directory that links the repository's paths, after the
  listed rewrites (a smaller `--scale`, fewer `--repeat`s) so CI runs it in seconds, not minutes;
- `Serve()`: a server command; it must print its STRATA_READY line and stop on SIGTERM;
- `WithServer()`: needs `$U`, the URL of a running server (a sim engine is started for it);
- `Skip(reason)`: not run here, and why (an install CI already runs, a measurement that takes minutes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def _uncommented(line: str) -> str:
    """A shell line without its trailing comment (the first ` #` outside quotes)."""
    for match in re.finditer(r"[ \t]+#", line):
        before = line[: match.start()]
        if before.count("'") % 2 == 0 and before.count('"') % 2 == 0:
            return before
    return line


@dataclass(frozen=True)
class Run:
    rewrite: tuple[tuple[str, str], ...] = ()  # (regex, replacement) applied in order
    timeout: float = 600.0
    exit_code: int = 0  # a command the docs show failing on purpose says so here

    def command(self, text: str) -> str:
        if self.rewrite:  # a trailing `# comment` would hide a line's end from the rewrites' `$`
            text = "\n".join(_uncommented(line) for line in text.split("\n"))
        for pattern, replacement in self.rewrite:
            text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
        return text


@dataclass(frozen=True)
class Serve:
    extra: str = "--port 0"  # appended unless the command already picks its port


@dataclass(frozen=True)
class WithServer:
    timeout: float = 60.0


@dataclass(frozen=True)
class Skip:
    reason: str


CI_SCALE = (r"--scale [0-9.]+", "--scale 0.02")
ONE_REPEAT = (r"--repeat [0-9]+", "--repeat 1")
NO_DEMO_REPEATS = (r"strata-bench demo$", "strata-bench demo --repeat 1")  # --scale would replace its 1/16
OWN_INSTALL = (
    r"^bash scripts/install.sh",
    'bash "$STRATA_ROOT/scripts/install.sh"',
)  # never an editable install of the scratch copy
INSTALLED = "CI runs it itself: .ci/run is the README's test command"
LLAMA_SERVER = (
    "a llama-server session built by scripts/install_llama_cpp.sh (a shell variable, a server left in the "
    "background); tests/bench/test_llama_cpp.py and tests/verify/test_llama_cpp_verify.py run the same bench "
    "and gate against a real llama-server"
)
CI_GATE = "CI's own gate runs exactly this, after the tests (.ci/run)"
VLLM_CACHE = (
    "vLLM's server (minutes to start here); tests/verify/test_verify_cache_engines.py runs the same check on it"
)
SEVERAL_HOSTS = (
    "several hosts at 10.0.0.1 with GPUs; tests/engine/test_dist_rendezvous.py runs the same env:// "
    "rendezvous with separate commands (and torchrun) on one host"
)
MINUTES = "a measurement that takes minutes at the size the docs report; its numbers sit beside it"

SMALL = (CI_SCALE, ONE_REPEAT)
# one scenario (every preset has read_alone): the command, its arms and its report are checked, not the table
PRESET_SMALL = (
    (r"(strata-bench preset \S+( --time-scale \S+)?)", r"\1 --repeat 1 --scale 0.02 --scenarios read_alone"),
)
INTERLEAVE_SMALL = ((r"interleave$", "interleave --scale 0.05"),)
HTTP_SMALL = ((r"bench_http_overhead.py$", "bench_http_overhead.py --max-tokens 64"),)

VLLM_SERVER = "a vLLM server for the commands after it; tests/conftest.py's vllm_server fixture starts the same one"
