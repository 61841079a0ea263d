"""The wheel's console scripts, `ckpt` and `ckpt-launch`: each replaces itself with the program of that name that the
wheel carries beside libckpt (ckpt/_lib/, cmake/wheel.cmake)."""

from __future__ import annotations

import os
import pathlib
import sys
from typing import NoReturn

PROGRAMS_DIR = pathlib.Path(__file__).resolve().parent / "_lib"


def _run(name: str) -> NoReturn:
    program = PROGRAMS_DIR / name
    if not os.access(program, os.X_OK):
        sys.exit(f"{name}: {program} is not there: this ckpt package is not the wheel, which carries the programs; "
                 f"use the {name} of the build tree (build/tools/{name}) or of an installed libckpt")
    os.execv(program, [name, *sys.argv[1:]])


def ckpt_tool() -> NoReturn:
    """`ckpt`: lists, verifies, compares, exports and imports checkpoints (`ckpt --help`)."""
    _run("ckpt")


def launcher() -> NoReturn:
    """`ckpt-launch -n N -- program args`: starts N local ranks of a job."""
    _run("ckpt-launch")
