"""The machinery of a restore: the target that restores a checkpoint whole when none is given, buffers registered
for every leaf of a target, and the tree rebuilt once the load filled them. ckpt.restore and
CheckpointManager.restore run one."""

from __future__ import annotations

import ctypes
import functools
import gc
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _dtypes, _tree, errors
from ._native import call
from ._options import load_options
from ._state import State, empty
from ._tree import Description
from ._types import PyTree
from .context import Context
from .reader import Reader, TensorInfo
from .tree import Shard

# The saved pytree's leaf descriptions by key (empty for a checkpoint without one).
Saved = Dict[str, Description]
# Gives a target leaf's restored value once the load filled its buffers.
Finisher = Callable[[Saved], Any]
CommonValue = Union[bool, int, float, str, bytes]

# Target leaves that stand for a common entry of each kind when no target is given.
_COMMON_PLACEHOLDER: Dict[str, CommonValue] = {"bool": False, "int": 0, "float": 0.0, "str": "", "bytes": b""}


def target_from_checkpoint(ctx: Context, source: bytes, path: str) -> PyTree:
    """The target that restores a checkpoint whole. Collective: a first load registers nothing and brings back the
    common entries wherever the checkpoint lies (on storage, or in the memory tier alone), and the saved pytree
    records every array's shape and dtype. A pytree written before it did, or a checkpoint written by another
    language (a flat dict of its tensors and common entries), is listed from storage.

    Arrays are numpy arrays; typed PRNG keys are jax.ShapeDtypeStructs of their key type, restored as typed keys
    on this process's first device (as uint32 key data, with a warning, where jax is not imported). Containers are
    what _tree.build makes: namedtuples, dataclasses and jax.tree_util nodes as their types where this program
    imported their modules (a restore never imports a module a checkpoint names), else dicts of their fields, with
    a warning naming the type. Pytrees written before records were can only give dicts."""
    with State() as state:
        opts, _c_progress = load_options(True, None)
        ctx.run(lambda: call("ckpt_load", ctx.handle, state.handle, source, ctypes.byref(opts)))
        text = state.common(_tree.STRUCTURE_KEY)
    if text is not None:
        encoded = _tree.parse(text.decode())
        stored = [d for d in _tree.leaves_of(encoded) if d["kind"] in ("array", "prng_key")]
        if all("shape" in d and "dtype" in d for d in stored):
            return _tree.build(encoded, _described_placeholder)
    return _target_from_storage(path)


def _described_placeholder(description: Description) -> Any:
    kind = description["kind"]
    if kind in ("array", "prng_key"):
        data = np.broadcast_to(np.empty((), _dtypes.dtype_of(description["dtype"])), tuple(description["shape"]))
        return _key_placeholder(description, data) if kind == "prng_key" else data
    return _COMMON_PLACEHOLDER[kind]


def _key_placeholder(description: Description, data: npt.NDArray[Any]) -> Any:
    """The target for typed PRNG keys whose key data `data` stands for: their jax.ShapeDtypeStruct where jax is
    imported and has their implementation, else `data` itself (with a warning)."""
    key, impl = description["key"], description.get("impl")
    if "jax" not in sys.modules:
        reason = "jax is not imported"
    elif impl is None:
        reason = "the checkpoint does not name their PRNG implementation"
    else:
        from . import _jax_arrays
        try:
            return _jax_arrays.key_target(data.shape, impl)
        except (ValueError, TypeError) as e:  # an implementation this jax lacks, or data not of its shape
            reason = str(e)
    warnings.warn(f"ckpt.restore: '{key}' holds typed PRNG keys and comes back as their uint32 key data: {reason}")
    return data


def _target_from_storage(path: str) -> PyTree:
    """target_from_checkpoint's target, from the checkpoint's files on storage."""
    with Reader(path) as reader:
        tensors = reader.tensors
        common = reader.common
    text = common.get(_tree.STRUCTURE_KEY)
    if text is None:
        target: Dict[str, Union[npt.NDArray[Any], bytes]] = {key: _placeholder(info) for key, info in tensors.items()}
        target.update({key: value for key, value in common.items()})
        return target
    encoded = _tree.parse(text.decode())

    def spec(description: Description) -> Any:
        key, kind = description["key"], description["kind"]
        if kind in ("array", "prng_key"):
            info = tensors.get(key)
            if info is None:
                raise errors.CorruptError(f"{path}: the pytree names tensor '{key}', which the checkpoint lacks")
            data = _placeholder(info)
            return _key_placeholder(description, data) if kind == "prng_key" else data
        return _COMMON_PLACEHOLDER[kind]

    return _tree.build(encoded, spec)


def _placeholder(info: TensorInfo) -> npt.NDArray[Any]:
    """A target leaf with a tensor's shape and dtype that holds no memory (the restore allocates the real one)."""
    return np.broadcast_to(np.empty((), info.dtype), info.shape)


def register_target(state: State, target: PyTree, flags: int = 0) -> Tuple[_tree.Node, List[Finisher]]:
    """Registers buffers for every leaf of `target`, with the shard `flags` (_options.load_flags); returns
    (structure, finishers), where finish(saved) gives the restored leaves once the load has filled them."""
    if "jax" in sys.modules:
        # JAX lets go of the host buffers it adopted (an earlier restore's arrays the caller dropped) only at its next
        # transfer or when Python's garbage collector runs (its gc callback): a collection of the youngest objects
        # hands them back to the page pool before this restore takes memory.
        gc.collect(0)
    leaves, structure = _tree.flatten(target)
    finishers: List[Optional[Finisher]] = []
    jax_leaves: List[Tuple[int, str, Any]] = []
    for key, leaf in leaves:
        if isinstance(leaf, Shard):
            like = np.asarray(leaf.data)
            buffer = empty(like.shape, like.dtype)
            state.add_tensor(key, buffer, leaf.global_shape, leaf.offset, leaf.replica, flags)
            finishers.append(functools.partial(_loaded_shard, buffer, leaf))
        elif isinstance(leaf, (np.ndarray, np.generic)):
            buffer = empty(np.shape(leaf), leaf.dtype)
            state.add_tensor(key, buffer, buffer.shape, (0,) * buffer.ndim, flags=flags)
            finishers.append(functools.partial(_loaded_array, buffer, isinstance(leaf, np.generic)))
        elif type(leaf) in _tree.COMMON_KINDS:
            finishers.append(functools.partial(_restore_common, state, key, _tree.COMMON_KINDS[type(leaf)]))
        elif _tree.is_jax_leaf(leaf):
            finishers.append(None)
            jax_leaves.append((len(finishers) - 1, key, leaf))
        else:
            raise TypeError(f"'{key}': a restore target leaf must be an array (numpy, jax), a jax.ShapeDtypeStruct, a "
                            f"ckpt.Shard, or a bool, int, float, str or bytes; not a {type(leaf).__qualname__}")
    if jax_leaves:
        from . import _jax_arrays  # imports jax, which numpy users never need
        made = _jax_arrays.register_for_restore(state, [(k, v) for _, k, v in jax_leaves], flags)
        for (index, _, _), finish in zip(jax_leaves, made):
            finishers[index] = finish
    return structure, [finish for finish in finishers if finish is not None]


def _loaded_shard(buffer: npt.NDArray[Any], target: Shard, saved: Saved) -> Shard:
    return Shard(buffer, target.global_shape, target.offset, target.replica)


def _loaded_array(buffer: npt.NDArray[Any], scalar: bool, saved: Saved) -> Any:
    """The loaded buffer, as a numpy scalar where the target leaf was one."""
    return buffer[()] if scalar else buffer


def _restore_common(state: State, key: str, target_kind: str, saved: Saved) -> CommonValue:
    """The common entry `key` as the target leaf's type, which must be the saved value's where the checkpoint's
    pytree records it: a restore never hands back another type than the target asked for."""
    saved_kind = saved.get(key, {}).get("kind", target_kind)
    if saved_kind != target_kind:
        raise errors.MismatchError(f"'{key}': the restore target's leaf is of type {target_kind}, but the checkpoint "
                                   f"saved a value of type {saved_kind} there; restore it into a {saved_kind} leaf")
    raw = state.common(key)
    if raw is None:
        raise errors.NotFoundError(f"the checkpoint has no entry '{key}'")
    return _decode_common(target_kind, raw, key)


def _decode_common(kind: str, raw: bytes, key: str) -> CommonValue:
    """The Python value of a common entry of `kind`, as _save.register_tree encoded it."""
    try:
        if kind == "bool":
            return raw == b"true"
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "str":
            return raw.decode()
        return raw
    except ValueError as e:
        raise errors.CorruptError(f"common entry '{key}' does not hold a {kind}: {raw[:40]!r}") from e


def finish_restore(state: State, structure: _tree.Node, finishers: List[Finisher]) -> PyTree:
    """The restored tree, once the load filled the buffers register_target registered."""
    text = state.common(_tree.STRUCTURE_KEY)
    saved: Saved = {}
    if text is not None:
        saved = {d["key"]: d for d in _tree.leaves_of(_tree.parse(text.decode()))}
    return _tree.unflatten(structure, [finish(saved) for finish in finishers])
