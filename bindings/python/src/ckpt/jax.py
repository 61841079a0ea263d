"""ckpt.jax: saves issued from inside jax.jit through an XLA FFI custom call (JitSaver). ckpt.save and
ckpt.restore take jax.Arrays themselves, without this module."""

from __future__ import annotations

import ctypes
import os
from typing import List, Optional, Tuple, Union

import jax
import numpy as np
import numpy.typing as npt
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from . import _tree, errors
from ._jax_arrays import is_key, key_impl
from ._native import call_status, lib
from ._options import tier_code
from ._types import PyTree, StrPath, Tier
from .context import Context

__all__ = ["JitSaver", "path_array", "MAX_PATH_BYTES"]

MAX_PATH_BYTES = 4096
_FFI_TARGET = "ckpt_jax_save"
_PLACEMENT_COLUMNS = 1 + 8


def path_array(path: StrPath) -> npt.NDArray[np.uint8]:
    """The path operand of JitSaver: `path` as a NUL-padded uint8[MAX_PATH_BYTES] array. Its shape never changes,
    so a jitted step that takes it recompiles for no path."""
    encoded = os.fsencode(os.fspath(path))
    if not encoded or len(encoded) >= MAX_PATH_BYTES or b"\0" in encoded:
        raise ValueError(f"a checkpoint path must be 1 to {MAX_PATH_BYTES - 1} bytes without NUL: {path!r}")
    out = np.zeros(MAX_PATH_BYTES, dtype=np.uint8)
    out[:len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return out


class _FfiLibrary:
    """The XLA FFI handler library, found beside libckpt or through CKPT_JAX_LIB, with the custom call registered
    once with XLA. Where JAX sees a GPU and libckpt_jax_cuda was built beside it, that one library serves every
    platform: the savers that ckpt_jax_ffi_open numbers live in the library that opened them, so the handlers that
    look them up must come from the same one."""

    _instance: Optional[_FfiLibrary] = None

    def __init__(self) -> None:
        lib.ckpt_version_number()  # loads libckpt first, so that the handler library binds to this copy
        path = os.environ.get("CKPT_JAX_LIB") or str(lib.path.parent / "libckpt_jax.so")
        cuda_path = os.path.join(os.path.dirname(path), "libckpt_jax_cuda.so")
        self.with_cuda = any(d.platform == "gpu" for d in jax.devices()) and os.path.exists(cuda_path)
        if self.with_cuda:
            path = cuda_path
        try:
            self.handlers = ctypes.CDLL(path)
        except OSError as e:
            raise errors.LibraryNotFoundError(
                f"cannot load the XLA FFI handler library {path}: {e}. It is built beside libckpt where python3 "
                "imports jax (cmake -DPython3_EXECUTABLE=...); set CKPT_JAX_LIB to point at it") from e
        self.handlers.ckpt_jax_ffi_open.restype = ctypes.c_int64
        self.handlers.ckpt_jax_ffi_open.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        self.handlers.ckpt_jax_ffi_wait.restype = ctypes.c_int32
        self.handlers.ckpt_jax_ffi_wait.argtypes = [ctypes.c_int64, ctypes.c_uint32, ctypes.c_void_p]
        self.handlers.ckpt_jax_ffi_close.restype = None
        self.handlers.ckpt_jax_ffi_close.argtypes = [ctypes.c_int64]
        jax.ffi.register_ffi_target(_FFI_TARGET, jax.ffi.pycapsule(self.handlers.ckpt_jax_save_cpu), platform="cpu")
        if self.with_cuda:
            jax.ffi.register_ffi_target(_FFI_TARGET, jax.ffi.pycapsule(self.handlers.ckpt_jax_save_cuda),
                                        platform="CUDA")

    @classmethod
    def get(cls) -> _FfiLibrary:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


# Mesh axes: a name, a tuple of names, or None (no axis).
Axes = Union[str, Tuple[str, ...], None]


def _axis_index(mesh: Mesh, axes: Axes) -> Union[int, jax.Array]:
    """This device's linear index along `axes` (a name, a tuple of names, or None) inside shard_map."""
    if axes is None:
        return 0
    index: Union[int, jax.Array] = 0
    for axis in (axes if isinstance(axes, tuple) else (axes,)):
        index = index * mesh.shape[axis] + jax.lax.axis_index(axis)
    return index


class JitSaver:
    """Saves a pytree of sharded jax.Arrays from inside jax.jit, through an XLA FFI custom call:

        saver = ckpt.jax.JitSaver(jax.tree.map(lambda x: x.sharding, state))

        @jax.jit
        def train_step(state, batch, path):
            state = update(state, batch)
            saver(path, state)            # every device stages its blocks; the save commits in the background
            return state

        state = train_step(state, batch, ckpt.jax.path_array(f"/ckpt/run/step-{step}"))
        saver.wait()                       # after the step ran: raises the save's failure, if any

    `shardings` is a pytree of NamedShardings over one mesh, with the structure of the trees to save (keys as
    ckpt.save derives them). The path is an operand, so one compiled step saves to a new path every time. The
    checkpoint is an ordinary one: ckpt.restore reads it into any sharding. A JitSaver issues its saves through its
    own ckpt.Context (made collectively here from jax.distributed, unless `context` is given): a context must not
    carry collectives from two threads at once, and the saves run on XLA's threads while Python may save or restore
    through the default context. `tier` is ckpt.save's: with "memory" every save goes into the node agent's memory
    (a save every step, as a crash loses nothing; the job needs CKPT_JOB_ID), with "both" to storage as well, and
    ckpt.restore reads such a path from memory."""

    def __init__(self, shardings: PyTree, *, context: Optional[Context] = None, tier: Tier = "storage") -> None:
        tier_number = tier_code(tier)
        leaves, _ = _tree.flatten(shardings)
        if not leaves:
            raise ValueError("JitSaver: the shardings tree has no leaf")
        meshes: List[Mesh] = []
        for key, sharding in leaves:
            if isinstance(sharding, NamedSharding):
                if not isinstance(sharding.mesh, Mesh):
                    raise TypeError(f"JitSaver: '{key}' is sharded over an abstract mesh; the saver needs the devices")
                if sharding.mesh not in meshes:
                    meshes.append(sharding.mesh)
            elif not isinstance(sharding, SingleDeviceSharding):
                raise TypeError(f"JitSaver: '{key}' has a {type(sharding).__name__}; leaves must have NamedShardings "
                                "over one mesh (or a SingleDeviceSharding, saved as replicated over it)")
        if len(meshes) != 1:
            raise TypeError(f"JitSaver: the NamedShardings must share one mesh; they use {len(meshes)}")
        self._keys = [key for key, _ in leaves]
        self._specs = [s.spec if isinstance(s, NamedSharding) else PartitionSpec() for _, s in leaves]
        self._mesh = meshes[0]
        self._local_devices = sum(1 for d in self._mesh.devices.flat if d.process_index == jax.process_index())
        self._library = _FfiLibrary.get()
        self._context = context or Context.from_jax(_private=True)
        self._context._adopt(self)
        self._id: Optional[int] = self._library.handlers.ckpt_jax_ffi_open(self._context.handle, tier_number)

    def __call__(self, path: jax.Array, tree: PyTree) -> jax.Array:
        """Inside jax.jit: saves `tree` (the structure of `shardings`) to the path held by the uint8 array `path`
        (path_array). Returns an int32 array, one zero per device, that nothing needs to use."""
        leaves, structure = _tree.flatten(tree)
        if [key for key, _ in leaves] != self._keys:
            raise ValueError(f"JitSaver: the tree's keys {[k for k, _ in leaves]} are not those of its shardings "
                             f"{self._keys}")
        values: List[jax.Array] = []
        specs: List[PartitionSpec] = []
        descriptions: List[_tree.Description] = []
        for (key, leaf), spec in zip(leaves, self._specs):
            # array_description refuses a type ckpt cannot store now, not inside the computation.
            if is_key(leaf.dtype):
                impl = key_impl(leaf.dtype)
                leaf = jax.random.key_data(leaf)
                description = _tree.array_description(key, "prng_key", leaf.shape, leaf.dtype, impl=impl.name)
                spec = PartitionSpec(*(list(spec) + [None] * (leaf.ndim - len(spec))))
            else:
                description = _tree.array_description(key, "array", leaf.shape, leaf.dtype)
            values.append(leaf)
            specs.append(PartitionSpec(*(list(spec) + [None] * (leaf.ndim - len(spec)))))
            descriptions.append(description)
        layout = [len(values)]
        for value in values:
            layout += [value.ndim, *value.shape]
        attributes = dict(saver=np.int64(self._saver_id()), keys="\n".join(self._keys),
                          layout=np.asarray(layout, np.int64), calls=np.int64(self._local_devices),
                          pytree=_tree.describe(structure, descriptions))
        mesh = self._mesh
        call = jax.ffi.ffi_call(_FFI_TARGET, jax.ShapeDtypeStruct((1,), np.int32), has_side_effect=True)

        def per_device(path_bytes: jax.Array, *blocks: jax.Array) -> jax.Array:
            rows = []
            for block, spec in zip(blocks, specs):
                used = {a for axes in spec if axes is not None
                        for a in (axes if isinstance(axes, tuple) else (axes,))}
                replica = _axis_index(mesh, tuple(a for a in mesh.axis_names if a not in used) or None)
                offsets = [_axis_index(mesh, axes) * block.shape[d] for d, axes in enumerate(spec)]
                row = [replica] + offsets + [0] * (_PLACEMENT_COLUMNS - 1 - len(offsets))
                rows.append(jax.numpy.stack([jax.numpy.asarray(v, dtype=np.int32) for v in row]))
            result: jax.Array = call(path_bytes, jax.numpy.stack(rows), *blocks, **attributes)
            return result

        mapped = jax.shard_map(per_device, mesh=mesh, in_specs=(PartitionSpec(), *specs),
                               out_specs=PartitionSpec(tuple(mesh.axis_names)), check_vma=False)
        saved: jax.Array = mapped(path, *values)
        return saved

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for the saves issued so far (call it once the jitted step has run) and raises the first
        failure as a ckpt.Error; returns False if `timeout` seconds passed first, else True."""
        timeout_ms = 0 if timeout is None else max(1, int(timeout * 1000))
        return call_status(self._library.handlers.ckpt_jax_ffi_wait, self._saver_id(), timeout_ms) == 0

    def _saver_id(self) -> int:
        """The number ckpt_jax_ffi_open gave the saver; ValueError once it is closed."""
        if self._id is None:
            raise ValueError("this ckpt.jax.JitSaver is closed")
        return self._id

    def _free(self) -> None:
        """Its context is closing: releases the saver, as close() does."""
        self.close()

    def close(self) -> None:
        """Waits for the saves in flight, then releases the saver (its context stays open)."""
        if self._id is not None:
            self._library.handlers.ckpt_jax_ffi_close(self._id)
            self._id = None
