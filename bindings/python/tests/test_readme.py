"""The Python quick start of README.md works as the README says: run on 2 processes x 2 devices, then continued by
1 process x 4 devices, which resumes from the 2-process run's latest step, resharded. examples/jax/train.py is the
same program."""

import ast
import os
import re

import numpy as np

import ckpt
import multiprocess

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


def readme_quickstart():
    text = open(os.path.join(REPO, "README.md")).read()
    found = re.search(r"^```python\n(.*?)^```$", text, re.S | re.M)
    assert found, "README.md has no ```python block"
    return found.group(1)


def test_quickstart_runs_on_2_processes_then_resumes_on_1(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(readme_quickstart())
    run = tmp_path / "run"
    first = multiprocess.run(str(script), 2, 2, run)
    assert "2 process(es), 4 devices: resumed from None, now at step 3; kept steps [2, 3]" in first[0], first[0]
    second = multiprocess.run(str(script), 1, 4, run)
    assert "1 process(es), 4 devices: resumed from 3, now at step 6; kept steps [5, 6]" in second[0], second[0]
    with ckpt.Reader(run / "step-000000000006") as reader:
        assert np.array_equal(reader.read("params/w"), np.arange(128, dtype=np.float32).reshape(16, 8) * 0.5**6)
        assert reader.common["step"] == b"6"


def test_the_example_is_the_readme_quickstart():
    example = open(os.path.join(REPO, "examples", "jax", "train.py")).read()
    assert ast.dump(ast.parse(readme_quickstart())) == ast.dump(_without_docstring(ast.parse(example)))


def _without_docstring(module):
    if module.body and isinstance(module.body[0], ast.Expr) and isinstance(module.body[0].value, ast.Constant):
        module.body = module.body[1:]
    return module
