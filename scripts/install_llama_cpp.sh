#!/usr/bin/env bash
# Build llama.cpp's C++ `llama-server` from the source that llama-cpp-python's sdist vendors, into a cache
# outside the repo, so tests and benches can run a foreign engine (an engine this project did not write).
# Usage: bash scripts/install_llama_cpp.sh          (idempotent: a finished build is reused)
# Prints the path of llama-server. Also installs into ./.venv, when that venv exists, the vendored `gguf`
# Python package (the GGUF exporter needs it) and llama-cpp-python itself (llama.cpp in process, for
# benchmarks/bench_model.py and the in-process greedy test), from a wheel built once into the cache (about
# 3 min on two cores); a failed wheel build only warns, as those users skip without it. Everything comes from the package registry (pip download
# of the sdist); nothing is fetched at run time.
# Environment: STRATA_LLAMA_CPP_DIR overrides the cache folder; STRATA_LLAMA_CPP_JOBS the build jobs.
set -euo pipefail
VERSION=0.3.36
CACHE=${STRATA_LLAMA_CPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/strata/llama.cpp-$VERSION}
JOBS=${STRATA_LLAMA_CPP_JOBS:-2}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
SERVER="$CACHE/build/bin/llama-server"
mkdir -p "$CACHE"

if [ ! -d "$CACHE/src/vendor/llama.cpp" ]; then
  rm -rf "$CACHE/src" "$CACHE/sdist"
  mkdir -p "$CACHE/sdist"
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$CACHE/sdist"
  mkdir -p "$CACHE/src.tmp"
  tar -xzf "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/src.tmp" --strip-components=1
  mv "$CACHE/src.tmp" "$CACHE/src"
fi

if [ ! -x "$SERVER" ]; then
  cmake -S "$CACHE/src/vendor/llama.cpp" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >"$CACHE/cmake.log" 2>&1 \
    || { tail -30 "$CACHE/cmake.log" >&2; exit 1; }
  cmake --build "$CACHE/build" --target llama-server -j "$JOBS" >"$CACHE/build.log" 2>&1 \
    || { tail -30 "$CACHE/build.log" >&2; exit 1; }
fi

if [ -x "$REPO/.venv/bin/python" ] && ! "$REPO/.venv/bin/python" -c "import gguf" 2>/dev/null; then
  "$REPO/.venv/bin/python" -m pip install -q "$CACHE/src/vendor/llama.cpp/gguf-py"
fi
WHEEL_DIR="$CACHE/wheels"
if [ -x "$REPO/.venv/bin/python" ] && ! "$REPO/.venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  if ! ls "$WHEEL_DIR"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF" "$REPO/.venv/bin/python" -m pip wheel -q --no-deps \
      -w "$WHEEL_DIR" "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" >"$CACHE/wheel.log" 2>&1 \
      || { tail -20 "$CACHE/wheel.log" >&2; echo "WARNING: llama-cpp-python not built; its users skip" >&2; }
  fi
  if ls "$WHEEL_DIR"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
    "$REPO/.venv/bin/python" -m pip install -q "$WHEEL_DIR"/llama_cpp_python-"$VERSION"-*.whl
  fi
fi
echo "$SERVER"
