#!/usr/bin/env bash
# Installs libckpt (cmake --install) and the Python package (pip install bindings/python) into a scratch prefix,
# then checks that the installed package finds the library each way it should, with no CKPT_LIB: through its own
# install prefix, and through pkg-config when the package lives elsewhere. Usage: check_install.sh BUILD PYTHON WORK
set -euo pipefail
build=$1 python=$2 work=$3
source_tree=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rm -rf "$work" && mkdir -p "$work"
unset CKPT_LIB PYTHONPATH
# pip builds in the directory it installs from: a copy keeps the source tree clean.
package=$work/package
mkdir -p "$package" && cp -r "$source_tree/pyproject.toml" "$source_tree/README.md" "$source_tree/src" "$package/"

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
"$python" -m pip install --quiet --no-deps --no-build-isolation --prefix "$work/prefix" "$package"
site=$("$python" -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '$work/prefix'}))")

# A one-rank save and restore, and which library the package loaded.
cat > "$work/use.py" <<'PY'
import sys, numpy as np, ckpt
ckpt.save(sys.argv[1], {"w": np.arange(6.0).reshape(2, 3), "step": 4}).wait()
restored = ckpt.restore(sys.argv[1])
assert restored["step"] == 4 and restored["w"].tolist() == [[0, 1, 2], [3, 4, 5]], restored
print(ckpt._native.lib.path)
PY

found=$(cd "$work" && PYTHONPATH="$site" PKG_CONFIG_PATH=/nonexistent "$python" use.py "$work/by-prefix")
case $found in "$work/prefix/"*) ;; *) echo "the package loaded $found, not the one in its prefix" >&2; exit 1;; esac

"$python" -m pip install --quiet --no-deps --no-build-isolation --target "$work/elsewhere" "$package"
libdir=$(dirname "$(find "$work/prefix" -name 'libckpt.so.0' | head -1)")
found=$(cd "$work" && PYTHONPATH="$work/elsewhere" PKG_CONFIG_PATH="$libdir/pkgconfig" "$python" use.py "$work/by-pc")
case $found in "$libdir/"*) ;; *) echo "through pkg-config the package loaded $found, not $libdir" >&2; exit 1;; esac
echo "python install: found libckpt through its install prefix and through pkg-config"
