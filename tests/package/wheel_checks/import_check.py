"""`import ckpt` in the venv the wheel was installed into, with no CKPT_* variable: the package finds the libckpt it
carries inside the venv, its version is the wheel's, and the console scripts `ckpt` and `ckpt-launch` are the venv's.
    Usage: import_check.py WHEEL_VERSION"""

import os
import pathlib
import shutil
import sys

leaked = sorted(name for name in os.environ if name.startswith("CKPT_"))
assert not leaked, f"the check must run without CKPT_* variables, found {leaked}"

import ckpt  # noqa: E402
import ckpt._native  # noqa: E402

venv = pathlib.Path(sys.prefix).resolve()
assert venv != pathlib.Path(sys.base_prefix).resolve(), f"{sys.executable} is not a venv's python"
library = ckpt._native.library_path().resolve()
assert library.is_relative_to(venv), f"ckpt loaded {library}, which is outside the venv {venv}"
versions = {"wheel": sys.argv[1], "ckpt.__version__": ckpt.__version__, "libckpt": ckpt.library_version()}
assert len(set(versions.values())) == 1, f"versions differ: {versions}"
for script in ("ckpt", "ckpt-launch"):
    found = shutil.which(script)
    assert found and pathlib.Path(found).resolve().is_relative_to(venv), f"{script} on PATH is {found}, not the venv's"
print(f"import ckpt {ckpt.__version__} (= libckpt's, the wheel's) from {pathlib.Path(ckpt.__file__).parent}, "
      f"library {library}")
