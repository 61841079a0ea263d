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


def resume_loop_globals(steps, trained):
    """What a README's resume loop leaves to its reader: a state of `steps` trained steps starts at 0 and gains one
    per training step; `trained` records which step each call trains."""
    def train_step(state):
        trained.append(state["steps"] + 1)
        return {"w": state["w"] + 1, "steps": state["steps"] + 1}

    def init():
        return {"w": np.zeros(4, np.float32), "steps": 0}

    return {"ckpt": ckpt, "init": init, "train_step": train_step, "steps": steps, "target": init(), "state": init()}


def check_saved_steps(root, steps):
    """Each saved step k holds the state after k training steps."""
    for step in steps:
        with ckpt.Reader(os.path.join(root, f"step-{step:012d}")) as reader:
            assert reader.common["steps"] == str(step).encode(), f"step {step} holds {reader.common['steps']!r}"
            assert np.array_equal(reader.read("w"), np.full(4, step, np.float32))


def test_the_binding_readmes_resume_loop_trains_and_saves_each_step_once(tmp_path):
    text = open(os.path.join(REPO, "bindings", "python", "README.md")).read()
    loops = [b for b in re.findall(r"^```py\n(.*?)^```$", text, re.S | re.M) if "for step in" in b]
    assert len(loops) == 1, "bindings/python/README.md has one resume loop"
    root = str(tmp_path / "run")
    code = loops[0].replace('"/ckpt/run"', repr(root))
    first, second = [], []
    exec(code, resume_loop_globals(250, first))
    assert first == list(range(1, 251))
    exec(code, resume_loop_globals(450, second))  # resumes from step 200, saved by the first run
    assert second == list(range(201, 451)), "the resumed run trains the steps after the saved one, once each"
    with ckpt.CheckpointManager(root) as manager:
        assert manager.all_steps() == [200, 300, 400]
    check_saved_steps(root, [200, 300, 400])
