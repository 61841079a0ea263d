#!/usr/bin/env bash
# Installs libckpt (cmake --install) and the pure-Python package (pip install bindings/python) into a scratch prefix,
# then checks, with no CKPT_LIB, that the installed package finds the library through its own install prefix, and
# through pkg-config when the package lives elsewhere; that a development install (pip install -e) runs the
# project's own tests against the build tree; and that no install writes into the source tree.
# Usage: check_install.sh BUILD PYTHON WORK
set -euo pipefail
build=$1 python=$2 work=$3
package=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
checkout=$(cd "$package/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
unset CKPT_LIB PYTHONPATH

# What is in the package's folder, ignored files included (but the interpreter's own __pycache__ folders, which the
# tests running beside this one write).
contents() { (cd "$package" && find . -name __pycache__ -prune -o -print | sort); }
contents > "$work/before"

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

# The development install: the package imported from the checkout, over the checkout's build tree (build/) with no
# setting, or over another build tree through CKPT_LIB; the project's numpy tests pass through it.
"$python" -m pip install --quiet --no-deps --no-build-isolation --prefix "$work/editable" --editable "$package"
editable_site=$("$python" -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '$work/editable'}))")
expected=$checkout/build/runtime/libckpt.so.0
if ! [ "$build" -ef "$checkout/build" ]; then
  export CKPT_LIB=$build/runtime/libckpt.so.0
  expected=$CKPT_LIB
fi
cat > "$work/editable.py" <<PY
import site, sys
site.addsitedir("$editable_site")  # reads the .pth file the editable install wrote
import ckpt, pytest
assert ckpt.__file__ == "$package/src/ckpt/__init__.py", ckpt.__file__
assert str(ckpt._native.library_path()) == "$expected", ckpt._native.library_path()
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "$package/tests/test_numpy.py"]))
PY
(cd "$work" && "$python" editable.py > "$work/editable.log" 2>&1) || { cat "$work/editable.log" >&2; exit 1; }
echo "python development install: the project's numpy tests pass over $expected ($(tail -1 "$work/editable.log"))"

contents > "$work/after"
if ! diff "$work/before" "$work/after" >&2; then
  echo "installing the package wrote into its source folder $package (above)" >&2
  exit 1
fi
echo "python install: nothing written into $package"
