"""One job of the manager tests, started as a process of its own (with ckpt-launch for several ranks):

    manager_job.py hold ROOT             (1 rank) saves steps 1-3 keeping 2, says "holding", waits for a line on
                                         stdin, saves steps 4-5, and checks that its steps are intact
    manager_job.py intrude ROOT PID      (any ranks) opens a manager on ROOT that the job of PID holds: every rank
                                         must be refused, naming the holder
    manager_job.py never-close ROOT      (1 rank) saves steps 1-3 and exits without closing the manager
"""

import os
import sys

import numpy as np

import ckpt


def tree_at(step):
    return {"w": np.arange(64, dtype=np.float32) * step, "step": step}


def hold(root):
    with ckpt.CheckpointManager(root, keep_last=2) as manager:
        for step in (1, 2, 3):
            manager.save(step, tree_at(step))
            manager.wait()
        print(f"holding {os.getpid()}", flush=True)
        sys.stdin.readline()
        for step in (4, 5):
            manager.save(step, tree_at(step))
            manager.wait()
        assert manager.all_steps() == [4, 5], manager.all_steps()
        assert manager.latest_step() == 5
        for step in (4, 5):
            restored = manager.restore(step, tree_at(0))
            assert restored["step"] == step
            np.testing.assert_array_equal(restored["w"], tree_at(step)["w"])
    print("the holder's steps are intact", flush=True)


def intrude(root, holder_pid):
    context = ckpt.Context()
    try:
        ckpt.CheckpointManager(root, keep_last=1, context=context)
    except ckpt.AlreadyExistsError as e:
        for part in (root, f"pid {holder_pid}", "another job"):
            assert part in str(e), f"{part!r} not in: {e}"
        print(f"rank {context.rank} refused: {e}", flush=True)
    else:
        sys.exit(f"rank {context.rank} opened a root that pid {holder_pid} holds")
    finally:
        context.close()


def never_close(root):
    """Returns the manager, which the script keeps until it exits, as a script's global would be."""
    manager = ckpt.CheckpointManager(root, keep_last=2)
    for step in (1, 2, 3):
        manager.save(step, tree_at(step))
    print("saved without closing", flush=True)
    return manager


if __name__ == "__main__":
    command, root = sys.argv[1], sys.argv[2]
    if command == "hold":
        hold(root)
    elif command == "intrude":
        intrude(root, int(sys.argv[3]))
    elif command == "never-close":
        kept = never_close(root)
    else:
        sys.exit(f"unknown command {command!r}")
