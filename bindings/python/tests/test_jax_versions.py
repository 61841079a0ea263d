"""The JAX versions that the package metadata states are those CI tests: the `jax` extra's range starts at the
oldest JAX that requirements.txt pins (the build's jaxlib, whose XLA FFI headers the JitSaver handlers are compiled
against) and holds the newest, and the JAX these tests run under is one of the two."""

import os
import re

import jax
from packaging.requirements import Requirement
from packaging.version import Version

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
PYPROJECTS = ("pyproject.toml", os.path.join("bindings", "python", "pyproject.toml"))


def pinned(name):
    """The versions of `name` that requirements.txt pins, one per environment, oldest first."""
    text = open(os.path.join(REPO, "requirements.txt")).read()
    return sorted(Version(v) for v in re.findall(rf"^{re.escape(name)}==(\S+?)(?:;.*)?$", text, re.M))


def jax_extra(pyproject):
    found = re.search(r'^jax = \["([^"]+)"\]$', open(os.path.join(REPO, pyproject)).read(), re.M)
    assert found, f"{pyproject} has no `jax` extra"
    return Requirement(found.group(1))


def test_the_jax_extra_spans_the_oldest_and_the_newest_tested_jax():
    oldest, newest = pinned("jax")
    assert pinned("jaxlib") == [oldest, newest]
    for pyproject in PYPROJECTS:
        extra = jax_extra(pyproject)
        assert f">={oldest}" in {str(s) for s in extra.specifier}, f"{pyproject}: {extra} does not start at {oldest}"
        assert newest in extra.specifier, f"{pyproject}: {extra} excludes the newest tested JAX, {newest}"
    build = open(os.path.join(REPO, "pyproject.toml")).read()
    assert f'"jaxlib=={oldest}"' in build, f"pyproject.toml's build does not use the oldest tested jaxlib, {oldest}"


def test_the_jax_under_test_is_a_tested_one():
    assert Version(jax.__version__) in pinned("jax")
