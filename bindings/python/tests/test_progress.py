"""What a save and a restore report while they run: Request.stats() and the progress= callables of ckpt.save,
ckpt.restore and the CheckpointManager."""

import threading

import numpy as np
import pytest

import ckpt

SAVE_PHASES = ["planning", "staging", "writing", "committing", "committed"]
LOAD_PHASES = ["planning", "reading", "loaded"]


def big_tree():
    return {"w": np.arange(2 << 20, dtype=np.float32)}  # 8 MB


class Recorder:
    """A progress callable that records its calls (thread-safe: a save's come from two threads)."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def __call__(self, phase, done, total):
        with self.lock:
            self.calls.append((phase, done, total))

    def phases(self):
        """The phases in the order they came, each once."""
        seen = []
        for phase, _, _ in self.calls:
            if not seen or seen[-1] != phase:
                seen.append(phase)
        return seen


def check_monotonic(calls):
    for (phase, done, total), (next_phase, next_done, _) in zip(calls, calls[1:]):
        assert done <= total
        if phase == next_phase:
            assert next_done >= done, f"{phase}: progress went back"


def test_stats_of_a_finished_save_add_up(tmp_path):
    tree = big_tree()
    request = ckpt.save(tmp_path / "c", tree)
    assert request.wait(timeout=60)
    stats = request.stats()
    assert isinstance(stats, ckpt.RequestStats) and stats.committed
    nbytes = tree["w"].nbytes
    assert stats.state_bytes == stats.bytes_to_write == nbytes
    assert stats.bytes_staged == stats.bytes_written == stats.bytes_committed == nbytes
    assert stats.files_written >= 1
    assert min(stats.planning_ns, stats.staging_ns, stats.writing_ns, stats.committing_ns) > 0
    assert stats.blocking_ns == stats.planning_ns + stats.staging_ns
    assert stats.total_ns == stats.blocking_ns + stats.writing_ns + stats.committing_ns
    assert stats.gbps == nbytes / stats.total_ns
    assert request.stats() == stats, "the final figures stay once the request is settled"


def test_stats_while_the_save_runs_show_it_uncommitted(tmp_path):
    held, release = threading.Event(), threading.Event()

    def hold_in_committing(phase, done, total):
        if phase == "committing":  # on the library's save thread: the save cannot commit until released
            held.set()
            release.wait(60)

    tree = big_tree()
    request = ckpt.save(tmp_path / "c", tree, progress=hold_in_committing)
    try:
        assert held.wait(60)
        running = request.stats()
        assert not running.committed and running.bytes_committed == 0
        assert running.bytes_written == tree["w"].nbytes and running.writing_ns > 0
        assert not request.done()
    finally:
        release.set()
    assert request.wait(timeout=60)
    assert request.stats().committed and request.stats().total_ns >= running.total_ns


def test_an_in_place_save_is_durable_when_save_returns(tmp_path):
    tree = {"w": np.arange(1 << 20, dtype=np.float32), "b": np.linspace(-1, 1, 7), "ids": np.arange(60).reshape(3, 20)}
    request = ckpt.save(tmp_path / "c", tree, in_place=True)
    stats = request.stats()
    assert stats.bytes_to_write > 0 and stats.bytes_written == stats.bytes_to_write, stats
    assert request.wait(timeout=60)
    fresh = {key: np.zeros_like(value) for key, value in tree.items()}
    restored = ckpt.restore(tmp_path / "c", fresh)
    for key, value in tree.items():
        np.testing.assert_array_equal(restored[key], value)


def test_in_place_must_be_true_or_false(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run") as manager:
        for in_place in ("yes", None, 2):
            with pytest.raises(ValueError, match="in_place must be True or False"):
                ckpt.save(tmp_path / "c", {"x": np.ones(4)}, in_place=in_place)
            with pytest.raises(ValueError, match="in_place must be True or False"):
                manager.save(1, {"x": np.ones(4)}, in_place=in_place)
        assert manager.latest_step() is None
    assert not (tmp_path / "c").exists()


def test_save_progress_runs_through_every_phase_to_committed(tmp_path):
    recorder = Recorder()
    tree = big_tree()
    ckpt.save(tmp_path / "c", tree, progress=recorder).wait(timeout=60)
    assert recorder.phases() == SAVE_PHASES
    check_monotonic(recorder.calls)
    nbytes = tree["w"].nbytes
    assert recorder.calls[0] == ("planning", 0, 0)
    assert recorder.calls[-1] == ("committed", nbytes, nbytes)


def test_restore_progress_runs_from_planning_to_loaded(tmp_path):
    tree = big_tree()
    ckpt.save(tmp_path / "c", tree).wait(timeout=60)
    recorder = Recorder()
    restored = ckpt.restore(tmp_path / "c", {"w": np.zeros_like(tree["w"])}, progress=recorder)
    assert np.array_equal(restored["w"], tree["w"])
    assert recorder.phases() == LOAD_PHASES
    check_monotonic(recorder.calls)
    assert recorder.calls[-1] == ("loaded", tree["w"].nbytes, tree["w"].nbytes)


def test_a_failing_save_and_restore_end_their_progress_with_failed(tmp_path):
    ckpt.save(tmp_path / "c", {"v": np.ones(3)}).wait(timeout=60)
    recorder = Recorder()
    with pytest.raises(ckpt.AlreadyExistsError):
        ckpt.save(tmp_path / "c", {"v": np.ones(3)}, progress=recorder)
    assert recorder.phases() == ["planning", "failed"]
    recorder = Recorder()
    with pytest.raises(ckpt.NotFoundError):
        ckpt.restore(tmp_path / "absent", {"v": np.ones(3)}, progress=recorder)
    assert recorder.phases() == ["planning", "failed"]


def test_a_progress_callable_that_raises_is_reported_once_and_the_save_commits(tmp_path, capfd):
    calls = []

    def broken(phase, done, total):
        calls.append(phase)
        raise RuntimeError("drawing failed")

    request = ckpt.save(tmp_path / "c", {"v": np.ones(3)}, progress=broken)
    assert request.wait(timeout=60) and request.stats().committed
    assert calls == ["planning"]
    assert "progress callback raised" in capfd.readouterr().err


def test_progress_must_be_callable(tmp_path):
    with pytest.raises(TypeError, match="progress"):
        ckpt.save(tmp_path / "c", {"v": np.ones(3)}, progress="verbose")


def test_the_manager_passes_progress_and_keeps_its_last_request(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run") as manager:
        saving = Recorder()
        assert manager.save(1, {"x": np.ones(4)}, progress=saving)
        manager.wait()
        assert manager.last_request.stats().committed
        assert saving.phases() == SAVE_PHASES
        for target in (None, {"x": np.zeros(4)}):  # the latest step through ckpt.restore, then through the manager
            loading = Recorder()
            assert manager.restore(target=target, progress=loading)["x"].tolist() == [1, 1, 1, 1]
            assert loading.phases() == LOAD_PHASES
