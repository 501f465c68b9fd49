#!/usr/bin/env bash
# Build llama.cpp's llama-server once (from the llama.cpp tree the llama-cpp-python source distribution
# vendors) and convert the default model to an F32 GGUF with the converter in the same tree, both cached
# outside the repository; a later run finds them and does nothing. The llama.cpp lane test uses them.
#   .ci/llama_server.sh            -> $INFLIGHT_LLAMA_DIR (default ~/.cache/inflight/llama.cpp-0.3.36)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
DIR="${INFLIGHT_LLAMA_DIR:-$HOME/.cache/inflight/llama.cpp-$VERSION}"
mkdir -p "$DIR"

if [ ! -x "$DIR/bin/llama-server" ]; then
  work="$(mktemp -d)"
  python -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work" >/dev/null
  tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
  src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
  # GGML_NATIVE=OFF: code built for the build machine's own CPU died on another VM (see NOTES)
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON >/dev/null
  cmake --build "$work/build" --target llama-server -j "$(nproc)"
  mkdir -p "$DIR/bin"
  cp -a "$work/build/bin/." "$DIR/bin/"
  rm -rf "$DIR/convert" && mkdir -p "$DIR/convert"
  cp -a "$src/convert_hf_to_gguf.py" "$src/gguf-py" "$DIR/convert/"
  [ -d "$src/conversion" ] && cp -a "$src/conversion" "$DIR/convert/" || true
  rm -rf "$work"
fi

GGUF="$DIR/SmolLM2-135M-Instruct-F32.gguf"
if [ ! -f "$GGUF" ]; then
  python -m pip install --quiet --target "$DIR/convert/deps" sentencepiece
  model="$(python -c 'from engine.config import DEFAULT_MODEL; from engine.model.files.loader import resolve_model_dir; print(resolve_model_dir(DEFAULT_MODEL))')"
  PYTHONPATH="$DIR/convert/gguf-py:$DIR/convert/deps" python "$DIR/convert/convert_hf_to_gguf.py" "$model" \
    --outtype f32 --outfile "$GGUF.part" >/dev/null
  mv "$GGUF.part" "$GGUF"
fi
echo "$DIR"
