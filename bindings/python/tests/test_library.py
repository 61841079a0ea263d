"""How the package finds libckpt: CKPT_LIB (a file or a directory), and a clear error naming what was tried when
nothing is found. Each case runs in a fresh interpreter, since a process loads the library once."""

import os
import pathlib
import shutil
import subprocess
import sys

import ckpt


def run_python(code, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "CKPT_LIB"}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)


def package_outside_the_checkout(tmp_path):
    """A copy of the package where no checkout's build tree is found: what an installed package sees."""
    shutil.copytree(pathlib.Path(ckpt.__file__).parent, tmp_path / "ckpt", ignore=shutil.ignore_patterns("_lib"))
    return tmp_path / "ckpt"


def test_ckpt_lib_may_name_the_file_or_its_directory():
    library = str(ckpt._native.lib.path)
    for value in (library, os.path.dirname(library)):
        done = run_python("import ckpt; print(ckpt.library_version())", CKPT_LIB=value)
        assert done.returncode == 0 and done.stdout.strip() == ckpt.library_version(), done.stderr


def test_a_wrong_ckpt_lib_is_named_in_the_error():
    done = run_python("import ckpt, numpy\nckpt.save('/tmp/never', {'x': numpy.ones(1)})", CKPT_LIB="/no/such/lib.so")
    assert done.returncode != 0
    assert "LibraryNotFoundError" in done.stderr and "CKPT_LIB=/no/such/lib.so" in done.stderr


def test_nothing_found_says_where_it_looked_each_place_once(tmp_path):
    # The linker's search is stubbed out so that a libckpt installed on this machine cannot be found.
    package_outside_the_checkout(tmp_path)
    code = ("import ctypes.util\nctypes.util.find_library = lambda name: None\nimport ckpt._native as n\n"
            "try:\n  n.library_path()\nexcept ImportError as e:\n  print(e)")
    done = run_python(code, PYTHONPATH=str(tmp_path), PKG_CONFIG_PATH="/nonexistent", PKG_CONFIG_LIBDIR="/nonexistent")
    assert "libckpt not found" in done.stdout and "set CKPT_LIB" in done.stdout, done.stdout + done.stderr
    assert "install prefix" in done.stdout and "the linker's search path" in done.stdout
    assert f"{tmp_path}/ckpt/_lib/libckpt.so.0 (this package (the wheel))" in done.stdout
    tried = done.stdout.split("Tried: ")[1].strip().split("; ")
    assert len(tried) == len(set(tried)), tried


def test_the_library_the_package_carries_comes_first(tmp_path):
    # As in the wheel: libckpt in the package's _lib/, found with no CKPT_LIB, before pkg-config and the linker.
    package = package_outside_the_checkout(tmp_path)
    (package / "_lib").mkdir()
    shutil.copy(ckpt._native.lib.path, package / "_lib" / "libckpt.so.0")
    done = run_python("import ckpt; print(ckpt._native.library_path()); print(ckpt.library_version())",
                      PYTHONPATH=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(package / "_lib" / "libckpt.so.0"), ckpt.library_version()]


def test_imported_from_a_checkout_the_package_uses_its_build_tree():
    package_dir = pathlib.Path(ckpt.__file__).resolve().parent
    checkout = package_dir.parents[3]
    assert (checkout / "include" / "ckpt.h").is_file(), f"the tests import the package from a checkout: {checkout}"
    built = checkout / "build" / "runtime" / "libckpt.so.0"
    done = run_python("import ckpt; print(ckpt._native.library_path())")
    if built.is_file():
        assert done.stdout.strip() == str(built), done.stdout + done.stderr
    else:
        assert str(built) not in done.stdout, done.stdout


def test_importing_the_package_needs_no_library():
    done = run_python("import ckpt; print(ckpt.Shard)", CKPT_LIB="/no/such/lib.so")
    assert done.returncode == 0, done.stderr
