#!/usr/bin/env bash
# Installs the CUDA compiler pieces the GPU crate's CPU tests use, no GPU or driver needed: NVRTC (compiles every
# CUDA kernel of roofline-gpu for sm_90 / sm_80 and reports spills) and cuobjdump + nvdisasm (their SASS: where
# loads sit against griddepcontrol.wait). From NVIDIA's PyPI wheels, pinned by version and SHA-256, into
# ~/.cache/roofline/cuda-tools (lib/ and bin/). Idempotent: does nothing when they are there. Prints nothing on
# success; scripts/test.sh puts the directories on LD_LIBRARY_PATH and PATH.
#
# Two NVRTCs: 12.9 (lib/, the tests' default) and 13.0 (nvrtc13/lib/, the CUDA 13 toolkit's, which the GPU machine
# and users with CUDA 13 compile with). They allocate registers differently (session 55: a ring build spilled under
# 13.0 only), so scripts/test.sh runs the spill tests under both.
#
#   ROOFLINE_CUDA_TOOLS   where they go (default: $HOME/.cache/roofline/cuda-tools)
set -euo pipefail

DEST="${ROOFLINE_CUDA_TOOLS:-$HOME/.cache/roofline/cuda-tools}"
if [ -e "$DEST/lib/libnvrtc.so" ] && [ -e "$DEST/nvrtc13/lib/libnvrtc.so" ] && [ -x "$DEST/bin/cuobjdump" ] \
  && [ -x "$DEST/bin/nvdisasm" ]; then
  exit 0
fi
# wheel (version pinned) | its SHA-256 | the directory inside it whose files we keep | where they go
WHEELS=(
  "nvidia-cuda-nvrtc-cu12==12.9.86|210cf05005a447e29214e9ce50851e83fc5f4358df8b453155d5e1918094dcb4|nvidia/cuda_nvrtc/lib/|lib"
  "nvidia-cuda-nvrtc==13.0.88|ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575|nvidia/cu13/lib/|nvrtc13/lib"
  "nvidia-cuda-cuobjdump==13.5.37|38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58|nvidia/cu13/bin/|bin"
  "nvidia-cuda-nvdisasm==13.5.37|d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca|nvidia/cu13/bin/|bin"
)
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
PIP="pip"
command -v pip >/dev/null 2>&1 || PIP="python3 -m pip"
mkdir -p "$TMP/out/lib" "$TMP/out/nvrtc13/lib" "$TMP/out/bin"
for w in "${WHEELS[@]}"; do
  IFS='|' read -r spec sha inner to <<<"$w"
  echo "fetch-cuda-tools: downloading $spec from PyPI" >&2
  $PIP download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 "$spec" -d "$TMP/dl"
  whl=$(ls "$TMP"/dl/"$(echo "${spec%%==*}" | tr - _)"-*.whl)
  echo "$sha  $whl" | sha256sum --check --quiet
  python3 - "$whl" "$inner" "$TMP/out/$to" <<'PY'
import os, sys, zipfile
whl, inner, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith(inner) and not name.endswith("/"):
            path = os.path.join(out, name[len(inner):])
            with z.open(name) as src, open(path, "wb") as dst:
                dst.write(src.read())
            os.chmod(path, 0o755)
PY
done
ln -sf libnvrtc.so.12 "$TMP/out/lib/libnvrtc.so"
ln -sf libnvrtc.so.13 "$TMP/out/nvrtc13/lib/libnvrtc.so"
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST"
mv "$TMP/out" "$DEST"
"$DEST/bin/cuobjdump" --version >/dev/null
