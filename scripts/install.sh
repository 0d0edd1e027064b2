#!/usr/bin/env bash
# Install Strata into ./.venv. Usage: bash scripts/install.sh [--test]
#   --test   also install the test extras (pytest, transformers as the oracle, openai client)
# Torch: an existing torch in the venv is kept (GPU users keep their CUDA build). Where none is
# present we ask for torch==2.13.0, which pip takes from a local wheel when one is on PIP_FIND_LINKS
# (CPU machines here) instead of downloading a multi-GB CUDA build for an unpinned "torch".
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${STRATA_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  $PIP install -q "torch==${STRATA_TORCH_VERSION:-2.13.0}"
fi
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
$PIP install -q -e ".${extras}"
echo "strata installed in $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
# The native ops for this CPU, built now (side by side, once per machine and source) rather than by the first
# `strata-engine serve`; a failed build is said and the engine serves ATen's path for that op.
"$VENV/bin/python" -m strata_engine.runtime.native || echo "WARNING: the native ops did not build; ATen's paths will serve" >&2
