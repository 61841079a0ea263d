"""How the package finds libckpt: CKPT_LIB (a file or a directory), and a clear error naming what was tried when
nothing is found. Each case runs in a fresh interpreter, since a process loads the library once."""

import os
import subprocess
import sys

import ckpt


def run_python(code, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "CKPT_LIB"}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)


def test_ckpt_lib_may_name_the_file_or_its_directory():
    library = str(ckpt._native.lib.path)
    for value in (library, os.path.dirname(library)):
        done = run_python("import ckpt; print(ckpt.library_version())", CKPT_LIB=value)
        assert done.returncode == 0 and done.stdout.strip() == ckpt.library_version(), done.stderr


def test_a_wrong_ckpt_lib_is_named_in_the_error():
    done = run_python("import ckpt, numpy\nckpt.save('/tmp/never', {'x': numpy.ones(1)})", CKPT_LIB="/no/such/lib.so")
    assert done.returncode != 0
    assert "LibraryNotFoundError" in done.stderr and "CKPT_LIB=/no/such/lib.so" in done.stderr


def test_nothing_found_says_where_it_looked():
    # The linker's search is stubbed out so that a libckpt installed on this machine cannot be found.
    code = ("import ctypes.util\nctypes.util.find_library = lambda name: None\nimport ckpt._native as n\n"
            "try:\n  n.library_path()\nexcept ImportError as e:\n  print(e)")
    done = run_python(code, PKG_CONFIG_PATH="/nonexistent", PKG_CONFIG_LIBDIR="/nonexistent")
    assert "libckpt not found" in done.stdout and "set CKPT_LIB" in done.stdout, done.stdout + done.stderr
    assert "install prefix" in done.stdout and "the linker's search path" in done.stdout


def test_importing_the_package_needs_no_library():
    done = run_python("import ckpt; print(ckpt.Shard)", CKPT_LIB="/no/such/lib.so")
    assert done.returncode == 0, done.stderr
