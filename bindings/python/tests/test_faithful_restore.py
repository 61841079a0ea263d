"""ckpt.restore(path) without a target gives back a tree to resume from: namedtuples, dataclasses, flax structs and
FrozenDicts, optax states, None leaves and dict key order as saved, typed PRNG keys as keys of their implementation.
A type the program has not imported (or that changed) comes back as a dict of its fields, with a warning naming it;
a restore never imports a module a checkpoint names. Checkpoints written before records were still restore."""

import collections
import dataclasses
import os
import re
import subprocess
import sys
import textwrap
import warnings
from typing import NamedTuple

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax.core  # noqa: E402
import flax.struct  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import pytest  # noqa: E402

import ckpt  # noqa: E402
from ckpt import _tree  # noqa: E402

Point = collections.namedtuple("Point", "x y")
Gone = collections.namedtuple("Gone", "a b", module="module_never_imported")


@dataclasses.dataclass
class Stats:
    total: np.ndarray
    history: list
    note: object = None


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: np.ndarray
    doubled: np.ndarray = dataclasses.field(init=False)  # a field __init__ does not take

    def __post_init__(self):
        object.__setattr__(self, "doubled", self.value * 2)


@flax.struct.dataclass
class Model:
    weights: jax.Array
    layers: int = flax.struct.field(pytree_node=False, default=2)
    names: tuple = flax.struct.field(pytree_node=False, default=("in", "out"))


class Head(flax.struct.PyTreeNode):
    bias: jax.Array
    activation: str = flax.struct.field(pytree_node=False, default="relu")


class WithFunction(flax.struct.PyTreeNode):
    params: jax.Array
    apply_fn: object = flax.struct.field(pytree_node=False, default=None)


@jax.tree_util.register_pytree_node_class
class Scaled:
    """A node type registered by hand, its static data a tuple of a str and an int."""

    def __init__(self, values, unit, power):
        self.values, self.unit, self.power = values, unit, power

    def tree_flatten(self):
        return (self.values,), (self.unit, self.power)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], *aux)


def restore_quietly(path, target=None):
    """ckpt.restore, failing the test on any warning (a fallback where none was expected)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return ckpt.restore(path, target)


def plain(value):
    """A leaf's values as numpy: a typed PRNG key's key data."""
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        value = jax.random.key_data(value)
    return np.asarray(value)


def assert_same(restored, saved):
    """The same structure for JAX (node types, static fields) and for ckpt (keys), and the same values."""
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(saved)
    got, want = _tree.flatten(restored)[0], _tree.flatten(saved)[0]
    assert [key for key, _ in got] == [key for key, _ in want]
    for (key, a), (_, b) in zip(got, want):
        np.testing.assert_array_equal(plain(a), plain(b), err_msg=key)


def test_namedtuples_dataclasses_none_leaves_and_key_order_come_back_as_saved(tmp_path):
    tree = {"zeta": Point(np.arange(3), [np.ones(2), None]), "alpha": None, "mid": (np.zeros(1), None),
            "stats": Stats(np.float32(4.5), [np.int64(1), np.int64(2)]), "frozen": Frozen(np.ones(2))}
    ckpt.save(tmp_path / "c", tree).wait()
    restored = restore_quietly(tmp_path / "c")
    assert list(restored) == ["zeta", "alpha", "mid", "stats", "frozen"]
    assert type(restored["zeta"]) is Point and restored["zeta"].y[1] is None
    assert restored["alpha"] is None and restored["mid"][1] is None and type(restored["mid"]) is tuple
    assert type(restored["stats"]) is Stats and restored["stats"].note is None
    assert type(restored["frozen"]) is Frozen
    assert_same(restored, tree)
    np.testing.assert_array_equal(restored["frozen"].doubled, [2, 2])


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_typed_prng_keys_come_back_as_keys_of_their_implementation(tmp_path, impl):
    keys = jax.random.split(jax.random.key(7, impl=impl), 3)
    ckpt.save(tmp_path / "c", {"rng": keys, "one": keys[0]}).wait()
    restored = restore_quietly(tmp_path / "c")
    for name, saved in (("rng", keys), ("one", keys[0])):
        assert jax.dtypes.issubdtype(restored[name].dtype, jax.dtypes.prng_key)
        assert restored[name].dtype == saved.dtype and restored[name].shape == saved.shape
        np.testing.assert_array_equal(jax.random.key_data(restored[name]), jax.random.key_data(saved))
    np.testing.assert_array_equal(jax.random.normal(restored["one"], (4,)), jax.random.normal(keys[0], (4,)))


def test_an_optax_adam_state_comes_back_as_its_types_and_resumes(tmp_path):
    params = {"w": jnp.arange(4.0), "b": jnp.ones(2)}
    grads = {"w": jnp.full(4, 0.5), "b": jnp.full(2, -1.0)}
    tx = optax.adam(1e-2)
    _, state = tx.update(grads, tx.init(params), params)
    ckpt.save(tmp_path / "c", {"opt": state, "params": params}).wait()
    restored = restore_quietly(tmp_path / "c")
    adam, empty = restored["opt"]
    assert type(adam) is optax.ScaleByAdamState and type(empty) is optax.EmptyState
    assert_same(restored["opt"], state)
    resumed, _ = tx.update(grads, restored["opt"], restored["params"])
    expected, _ = tx.update(grads, state, params)
    assert_same(resumed, expected)


def test_flax_structs_and_frozen_dicts_come_back_as_their_types(tmp_path):
    tree = {"model": Model(jnp.arange(6.0).reshape(2, 3), layers=5, names=("a", "b", "c")),
            "head": Head(jnp.zeros(3), activation="gelu"),
            "params": flax.core.FrozenDict({"dense": {"kernel": np.ones((2, 2))}, "bias": np.zeros(2)})}
    ckpt.save(tmp_path / "c", tree).wait()
    restored = restore_quietly(tmp_path / "c")
    assert type(restored["model"]) is Model and restored["model"].layers == 5
    assert restored["model"].names == ("a", "b", "c")
    assert type(restored["head"]) is Head and restored["head"].activation == "gelu"
    assert type(restored["params"]) is flax.core.FrozenDict
    assert_same(restored, tree)


def test_a_node_type_registered_with_jax_comes_back_through_its_unflatten_function(tmp_path):
    ckpt.save(tmp_path / "c", [Scaled({"a": np.ones(2)}, "ms", 3)]).wait()
    restored = restore_quietly(tmp_path / "c")[0]
    assert type(restored) is Scaled and (restored.unit, restored.power) == ("ms", 3)
    np.testing.assert_array_equal(restored.values["a"], [1, 1])


def test_a_type_whose_module_is_not_imported_comes_back_as_a_dict_with_a_warning(tmp_path):
    ckpt.save(tmp_path / "c", {"state": Gone(np.ones(2), 3)}).wait()
    with pytest.warns(UserWarning, match=r"module_never_imported\.Gone comes back as a dict: .*not imported"):
        restored = ckpt.restore(tmp_path / "c")
    assert restored["state"].keys() == {"a", "b"} and restored["state"]["b"] == 3
    np.testing.assert_array_equal(restored["state"]["a"], [1, 1])
    assert type(ckpt.restore(tmp_path / "c", {"state": Gone(np.zeros(2), 0)})["state"]) is Gone


def test_a_type_defined_in_a_function_comes_back_as_a_dict_with_a_warning(tmp_path):
    class Local(NamedTuple):
        u: np.ndarray

    ckpt.save(tmp_path / "c", {"state": Local(np.ones(1))}).wait()
    with pytest.warns(UserWarning, match=r"Local comes back as a dict: it was defined inside a function"):
        restored = ckpt.restore(tmp_path / "c")
    assert list(restored["state"]) == ["u"]


def test_a_type_whose_fields_changed_comes_back_as_a_dict_with_a_warning(tmp_path, monkeypatch):
    ckpt.save(tmp_path / "c", {"p": Point(np.ones(1), np.zeros(1))}).wait()
    monkeypatch.setattr(sys.modules[__name__], "Point", collections.namedtuple("Point", "x z"))
    with pytest.warns(UserWarning, match=r"Point comes back as a dict: its fields are now \['x', 'z'\]"):
        restored = ckpt.restore(tmp_path / "c")
    assert list(restored["p"]) == ["x", "y"]


def test_a_flax_struct_whose_fields_changed_comes_back_as_a_dict_with_a_warning(tmp_path, monkeypatch):
    ckpt.save(tmp_path / "c", {"head": Head(jnp.ones(3), activation="tanh")}).wait()

    class Renamed(flax.struct.PyTreeNode):  # Head with its one array field renamed, its static field the same
        kernel: jax.Array
        activation: str = flax.struct.field(pytree_node=False, default="relu")

    monkeypatch.setattr(sys.modules[__name__], "Head", Renamed)
    with pytest.warns(UserWarning, match=r"Head comes back as a dict: rebuilt, it has the fields \['kernel'\], "
                                         r"the checkpoint's \['bias'\]"):
        restored = ckpt.restore(tmp_path / "c")
    assert list(restored["head"]) == ["bias"]


def test_a_flax_struct_with_a_function_in_a_static_field_comes_back_as_a_dict_with_a_warning(tmp_path):
    ckpt.save(tmp_path / "c", {"train": WithFunction(jnp.ones(2, jnp.float32), apply_fn=len)}).wait()
    with pytest.warns(UserWarning, match=r"WithFunction comes back as a dict: its static data .* could not be"):
        restored = ckpt.restore(tmp_path / "c")
    assert list(restored["train"]) == ["params"]
    target = {"train": WithFunction(jax.ShapeDtypeStruct((2,), jnp.float32), apply_fn=len)}
    assert restore_quietly(tmp_path / "c", target)["train"].apply_fn is len


def test_a_restore_never_imports_a_module_the_checkpoint_names(tmp_path, monkeypatch):
    (tmp_path / "named_by_checkpoint.py").write_text(
        "import collections\nState = collections.namedtuple('State', 'step')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import named_by_checkpoint
    ckpt.save(tmp_path / "c", {"s": named_by_checkpoint.State(np.int64(3))}).wait()
    assert type(restore_quietly(tmp_path / "c")["s"]) is named_by_checkpoint.State
    monkeypatch.delitem(sys.modules, "named_by_checkpoint")
    with pytest.warns(UserWarning, match=r"named_by_checkpoint\.State comes back as a dict: module "
                                         r"named_by_checkpoint is not imported"):
        restored = ckpt.restore(tmp_path / "c")
    assert "named_by_checkpoint" not in sys.modules and restored["s"]["step"] == 3


def test_a_program_without_jax_gets_key_data_and_dicts_with_warnings(tmp_path):
    tx = optax.sgd(0.1, momentum=0.9)
    state = tx.init({"w": jnp.ones(2)})
    ckpt.save(tmp_path / "c", {"rng": jax.random.key(1), "opt": state}).wait()
    script = textwrap.dedent(f"""
        import sys, warnings
        import ckpt
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            restored = ckpt.restore({str(tmp_path / "c")!r})
        assert "jax" not in sys.modules, "ckpt imported jax"
        assert restored["rng"].dtype == "uint32" and restored["rng"].shape == (2,), restored["rng"]
        assert type(restored["opt"][0]) is dict and list(restored["opt"][0]) == ["trace"], restored
        print("\\n".join(str(w.message) for w in caught))
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "'rng' holds typed PRNG keys and comes back as their uint32 key data: jax is not imported" in done.stdout
    assert re.search(r"optax\.[\w.]+\.TraceState comes back as a dict: module optax\.[\w.]+ is not imported",
                     done.stdout), done.stdout


# A checkpoint's pytree as ckpt wrote it before records (and dict key order) were: namedtuples, dataclasses and
# jax.tree_util nodes were dicts of their fields, naming their type in "type" (which no reader used). The tree:
# {"key": rbg key, "nothing": None, "opt": optax.adam state over {"w": float32[2]}, "params": {"w": ...}, "step": 3}.
PYTREE_BEFORE_RECORDS = (
    '{"format":1,"root":{"t":"dict","c":[{"key":"key","kind":"prng_key","shape":[4],"dtype":7,"impl":"rbg",'
    '"t":"leaf"},{"t":"none"},{"t":"tuple","c":[{"t":"dict","c":[{"key":"opt/0/count","kind":"array","shape":[],'
    '"dtype":6,"t":"leaf"},{"t":"dict","c":[{"key":"opt/0/mu/w","kind":"array","shape":[2],"dtype":12,"t":"leaf"}],'
    '"k":["w"]},{"t":"dict","c":[{"key":"opt/0/nu/w","kind":"array","shape":[2],"dtype":12,"t":"leaf"}],'
    '"k":["w"]}],"k":["count","mu","nu"],"type":"optax._src.transform.ScaleByAdamState"},{"t":"dict","c":[],'
    '"k":[],"type":"optax._src.base.EmptyState"}]},{"t":"dict","c":[{"key":"params/w","kind":"array","shape":[2],'
    '"dtype":12,"t":"leaf"}],"k":["w"]},{"key":"step","kind":"int","t":"leaf"}],'
    '"k":["key","nothing","opt","params","step"]}}')


def test_a_checkpoint_from_before_records_restores_with_and_without_a_target(tmp_path, monkeypatch):
    params = {"w": jnp.array([1.0, 2.0], jnp.float32)}  # the dtypes the pytree below records
    tree = {"key": jax.random.key(5, impl="rbg"), "nothing": None, "opt": optax.adam(0.1).init(params),
            "params": params, "step": 3}
    with monkeypatch.context() as patched:
        patched.setattr(_tree, "describe", lambda structure, descriptions: PYTREE_BEFORE_RECORDS)
        ckpt.save(tmp_path / "c", tree).wait()
    assert ckpt.Reader(tmp_path / "c").common[_tree.STRUCTURE_KEY].decode() == PYTREE_BEFORE_RECORDS
    inspected = restore_quietly(tmp_path / "c")
    assert inspected["opt"][1] == {} and list(inspected["opt"][0]) == ["count", "mu", "nu"]
    assert inspected["nothing"] is None and inspected["step"] == 3
    assert inspected["key"].dtype == tree["key"].dtype
    np.testing.assert_array_equal(jax.random.key_data(inspected["key"]), jax.random.key_data(tree["key"]))
    resumed = restore_quietly(tmp_path / "c", tree)
    assert type(resumed["opt"][0]) is optax.ScaleByAdamState
    assert_same(resumed, tree)
