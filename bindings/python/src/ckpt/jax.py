"""JAX support: jax.Arrays of any sharding saved from every process's addressable shards, restored into any target
sharding through the collective read-once load, and saves issued from inside jax.jit through an XLA FFI custom call
(ckpt.jax.JitSaver).

Imported by ckpt.save and ckpt.restore only when a tree holds JAX values."""

import functools

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from . import dtypes, errors
from ._state import empty_aligned

__all__ = ["JitSaver", "path_array", "MAX_PATH_BYTES"]


def box_of(index, shape):
    """(offset, extent) of the box that a shard index (one slice per dimension) selects."""
    offset, extent = [], []
    for part, length in zip(index, shape):
        start, stop, _ = part.indices(length)
        offset.append(start)
        extent.append(max(0, stop - start))
    return tuple(offset), tuple(extent)


def _is_key(dtype):
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _key_impl(dtype):
    """The PRNG implementation of a typed key dtype (its name and the shape of one key's data)."""
    impl = getattr(dtype, "_impl", None)
    if impl is None:
        raise TypeError(f"cannot tell the PRNG implementation of {dtype}")
    return impl


def _host_copies(buffers):
    """numpy views of single-device arrays: zero-copy for CPU buffers; for accelerators, one batched transfer."""
    on_cpu = [b.devices().pop().platform == "cpu" for b in buffers]
    if all(on_cpu):
        return [np.asarray(b) for b in buffers]
    remote = [b for b, cpu in zip(buffers, on_cpu) if not cpu]
    fetched = iter(jax.device_get(remote))  # starts every device-to-host copy before waiting for any
    return [np.asarray(b) if cpu else next(fetched) for b, cpu in zip(buffers, on_cpu)]


def register_for_save(state, leaves):
    """Registers the addressable shards of each (key, jax.Array) in `leaves`: one box per distinct shard index of
    this process (the lowest replica among its devices), with the global offset from the shard's index. Returns
    [(position, description)] for the pytree structure."""
    from . import checkpoint
    arrays, descriptions = [], []
    for key, leaf in leaves:
        if isinstance(leaf, jax.ShapeDtypeStruct):
            raise TypeError(f"'{key}': a jax.ShapeDtypeStruct describes an array but holds no values to save")
        if _is_key(leaf.dtype):
            impl = _key_impl(leaf.dtype).name
            leaf = jax.random.key_data(leaf)
            description = checkpoint.array_description(key, "prng_key", leaf.shape, leaf.dtype, impl=impl)
        else:
            description = checkpoint.array_description(key, "array", leaf.shape, leaf.dtype)
        arrays.append((key, leaf))
        descriptions.append(description)
    jax.block_until_ready([array for _, array in arrays])
    chosen = []
    for key, array in arrays:
        lowest = {}
        for shard in array.addressable_shards:
            offset, _ = box_of(shard.index, array.shape)
            if offset not in lowest or shard.replica_id < lowest[offset].replica_id:
                lowest[offset] = shard
        chosen.extend((key, array.shape, offset, lowest[offset]) for offset in sorted(lowest))
    host = _host_copies([shard.data for _, _, _, shard in chosen])
    for (key, shape, offset, shard), data in zip(chosen, host):
        state.add_tensor(key, dtypes.native(data), shape, offset, shard.replica_id)
    return list(enumerate(descriptions))


def _key_data_sharding(sharding, ndim, key_ndim):
    """The sharding of the key data of typed keys laid out by `sharding` (its trailing dimensions whole)."""
    if isinstance(sharding, SingleDeviceSharding):
        return sharding
    if isinstance(sharding, NamedSharding):
        spec = list(sharding.spec) + [None] * (ndim - len(sharding.spec))
        return NamedSharding(sharding.mesh, PartitionSpec(*spec, *([None] * key_ndim)))
    raise TypeError(f"typed PRNG keys can be restored into a NamedSharding or a SingleDeviceSharding, not a "
                    f"{type(sharding).__name__}")


def register_for_restore(state, leaves, flags=0):
    """Registers one buffer per distinct box that this process's devices hold, with the shard `flags`, for each (key,
    jax.Array or jax.ShapeDtypeStruct) in `leaves`. Returns one finish(saved) per leaf, which builds the jax.Array once the load
    has filled the buffers (`saved` maps keys to their descriptions in the checkpoint's pytree)."""
    finishers = []
    for key, target in leaves:
        shape, dtype = tuple(target.shape), target.dtype
        sharding = getattr(target, "sharding", None) or SingleDeviceSharding(jax.local_devices()[0])
        impl = None
        if _is_key(dtype):
            impl = _key_impl(dtype)
            sharding = _key_data_sharding(sharding, len(shape), len(impl.key_shape))
            shape, dtype = shape + tuple(impl.key_shape), np.dtype(np.uint32)
        buffers, placement = {}, []
        for device, index in sharding.addressable_devices_indices_map(shape).items():
            offset, extent = box_of(index, shape)
            if offset not in buffers:
                buffers[offset] = empty_aligned(extent, dtype)
                state.add_tensor(key, buffers[offset], shape, offset, flags=flags)
            placement.append((device, buffers[offset]))
        finishers.append(functools.partial(_assemble, key, shape, dtype, sharding, placement, impl))
    return finishers


def _assemble(key, shape, dtype, sharding, placement, impl, saved):
    # On the CPU, device_put adopts a page-aligned buffer without a copy. A box held by several of this process's
    # devices is loaded once; each further device gets its own copy, so that no two arrays share memory (XLA may
    # write into a donated buffer).
    host, taken = [], set()
    for _, buffer in placement:
        if id(buffer) in taken:
            copy = empty_aligned(buffer.shape, buffer.dtype)
            np.copyto(copy, buffer)
            buffer = copy
        taken.add(id(buffer))
        host.append(buffer)
    pieces = jax.device_put(host, [device for device, _ in placement])
    # The dtype is given for a process that holds none of the array's devices (no piece to take it from).
    array = jax.make_array_from_single_device_arrays(shape, sharding, pieces, dtype=dtype)
    if impl is None:
        return array
    description = saved.get(key, {})
    if description.get("kind") == "prng_key" and description.get("impl") != impl.name:
        raise errors.MismatchError(f"'{key}': the checkpoint holds {description.get('impl')} keys, the target "
                                   f"{impl.name} keys")
    return jax.random.wrap_key_data(array, impl=impl.name)


# ---------------------------------------------------------------------------------------------------------------
# Saves from inside jax.jit
# ---------------------------------------------------------------------------------------------------------------

MAX_PATH_BYTES = 4096
_FFI_TARGET = "ckpt_jax_save"
_PLACEMENT_COLUMNS = 1 + 8


def path_array(path):
    """The path operand of JitSaver: `path` as a NUL-padded uint8[MAX_PATH_BYTES] array. Its shape never changes,
    so a jitted step that takes it recompiles for no path."""
    import os
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

    _instance = None

    def __init__(self):
        import ctypes
        import os
        from ._native import lib
        lib.ckpt_version_number()  # loads libckpt first, so that the handler library binds to this copy
        explicit = os.environ.get("CKPT_JAX_LIB")
        directory = lib.path.parent if explicit is None else None
        path = explicit or str(directory / "libckpt_jax.so")
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
    def get(cls):
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


def _axis_index(mesh, axes):
    """This device's linear index along `axes` (a name, a tuple of names, or None) inside shard_map."""
    if axes is None:
        return 0
    index = 0
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

    def __init__(self, shardings, *, context=None, tier="storage"):
        from . import checkpoint, context as context_module, tree as tree_module
        tier_code = checkpoint.tier_code(tier)
        leaves, _ = tree_module.flatten(shardings)
        if not leaves:
            raise ValueError("JitSaver: the shardings tree has no leaf")
        meshes = []
        for key, sharding in leaves:
            if isinstance(sharding, NamedSharding):
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
        self._context = context or context_module.Context.from_jax(_private=True)
        self._context.adopt(self)
        self._id = self._library.handlers.ckpt_jax_ffi_open(self._context.handle, tier_code)

    def __call__(self, path, tree):
        """Inside jax.jit: saves `tree` (the structure of `shardings`) to the path held by the uint8 array `path`
        (path_array). Returns an int32 array, one zero per device, that nothing needs to use."""
        from . import checkpoint, tree as tree_module
        leaves, structure = tree_module.flatten(tree)
        if [key for key, _ in leaves] != self._keys:
            raise ValueError(f"JitSaver: the tree's keys {[k for k, _ in leaves]} are not those of its shardings "
                             f"{self._keys}")
        values, specs, descriptions = [], [], []
        for (key, leaf), spec in zip(leaves, self._specs):
            # array_description refuses a type ckpt cannot store now, not inside the computation.
            if _is_key(leaf.dtype):
                impl = _key_impl(leaf.dtype)
                leaf = jax.random.key_data(leaf)
                description = checkpoint.array_description(key, "prng_key", leaf.shape, leaf.dtype, impl=impl.name)
                spec = PartitionSpec(*(list(spec) + [None] * (leaf.ndim - len(spec))))
            else:
                description = checkpoint.array_description(key, "array", leaf.shape, leaf.dtype)
            values.append(leaf)
            specs.append(PartitionSpec(*(list(spec) + [None] * (leaf.ndim - len(spec)))))
            descriptions.append(description)
        layout = [len(values)]
        for value in values:
            layout += [value.ndim, *value.shape]
        attributes = dict(saver=np.int64(self._id), keys="\n".join(self._keys), layout=np.asarray(layout, np.int64),
                          calls=np.int64(self._local_devices), pytree=tree_module.describe(structure, descriptions))
        mesh = self._mesh
        call = jax.ffi.ffi_call(_FFI_TARGET, jax.ShapeDtypeStruct((1,), np.int32), has_side_effect=True)

        def per_device(path_bytes, *blocks):
            rows = []
            for block, spec in zip(blocks, specs):
                used = {a for axes in spec if axes is not None
                        for a in (axes if isinstance(axes, tuple) else (axes,))}
                replica = _axis_index(mesh, tuple(a for a in mesh.axis_names if a not in used) or None)
                offsets = [_axis_index(mesh, axes) * block.shape[d] for d, axes in enumerate(spec)]
                row = [replica] + offsets + [0] * (_PLACEMENT_COLUMNS - 1 - len(offsets))
                rows.append(jax.numpy.stack([jax.numpy.asarray(v, dtype=np.int32) for v in row]))
            return call(path_bytes, jax.numpy.stack(rows), *blocks, **attributes)

        mapped = jax.shard_map(per_device, mesh=mesh, in_specs=(PartitionSpec(), *specs),
                               out_specs=PartitionSpec(tuple(mesh.axis_names)), check_vma=False)
        return mapped(path, *values)

    def wait(self, timeout=None):
        """Waits for the saves issued so far (call it once the jitted step has run) and raises the first
        failure as a ckpt.Error; returns False if `timeout` seconds passed first, else True."""
        from ._native import call_status
        timeout_ms = 0 if timeout is None else max(1, int(timeout * 1000))
        return call_status(self._library.handlers.ckpt_jax_ffi_wait, self._id, timeout_ms) == 0

    def close(self):
        """Waits for the saves in flight, then releases the saver (its context stays open)."""
        if self._id is not None:
            self._library.handlers.ckpt_jax_ffi_close(self._id)
            self._id = None
