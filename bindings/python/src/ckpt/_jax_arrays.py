"""jax.Arrays in saves and restores: each process registers its addressable shards for a save, and buffers for the
boxes its devices hold in a restore's target sharding, which become the restored jax.Arrays once the collective
read-once load filled them.

Imported by a save or a restore only when its tree holds JAX values."""

from __future__ import annotations

import functools
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Protocol, Sequence, Set, Tuple

import jax
import numpy as np
import numpy.typing as npt
from jax.sharding import NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding
from jax.typing import DTypeLike

from . import _dtypes, _native, errors
from ._state import State, empty_aligned
from ._tree import Description, array_description


def box_of(index: Tuple[slice, ...], shape: Sequence[int]) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(offset, extent) of the box that a shard index (one slice per dimension) selects."""
    offset: List[int] = []
    extent: List[int] = []
    for part, length in zip(index, shape):
        start, stop, _ = part.indices(length)
        offset.append(start)
        extent.append(max(0, stop - start))
    return tuple(offset), tuple(extent)


def is_key(dtype: DTypeLike) -> bool:
    """Whether `dtype` is that of typed PRNG keys (saved as their key data)."""
    return jax.numpy.issubdtype(dtype, jax.dtypes.prng_key)


class KeyImpl(Protocol):
    """A PRNG implementation, as a typed key's dtype holds it."""

    name: str
    key_shape: Tuple[int, ...]


def key_impl(dtype: DTypeLike) -> KeyImpl:
    """The PRNG implementation of a typed key dtype (its name and the shape of one key's data)."""
    impl: Optional[KeyImpl] = getattr(dtype, "_impl", None)
    if impl is None:
        raise TypeError(f"cannot tell the PRNG implementation of {dtype}")
    return impl


def key_target(data_shape: Tuple[int, ...], impl: str) -> jax.ShapeDtypeStruct:
    """The restore target for typed keys of the PRNG implementation `impl` (its name, "threefry2x32", "rbg") whose
    key data has `data_shape`; ValueError for an implementation this jax does not know, TypeError for a shape that
    does not end with its keys' data shape."""
    data = jax.ShapeDtypeStruct(data_shape, np.uint32)
    target: jax.ShapeDtypeStruct = jax.eval_shape(functools.partial(jax.random.wrap_key_data, impl=impl), data)
    return target


def _host_copies(buffers: List[jax.Array]) -> List[npt.NDArray[Any]]:
    """numpy views of single-device arrays: zero-copy for CPU buffers; for accelerators, one batched transfer."""
    on_cpu = [b.devices().pop().platform == "cpu" for b in buffers]
    if all(on_cpu):
        return [np.asarray(b) for b in buffers]
    remote = [b for b, cpu in zip(buffers, on_cpu) if not cpu]
    fetched = iter(jax.device_get(remote))  # starts every device-to-host copy before waiting for any
    return [np.asarray(b) if cpu else next(fetched) for b, cpu in zip(buffers, on_cpu)]


def register_for_save(state: State, leaves: List[Tuple[str, Any]],
                      compressed: AbstractSet[str] = frozenset()) -> List[Tuple[int, Description]]:
    """Registers the addressable shards of each (key, jax.Array) in `leaves`: one box per distinct shard index of
    this process (the lowest replica among its devices), with the global offset from the shard's index, and
    CKPT_SHARD_COMPRESS for the keys in `compressed`. Returns [(position, description)] for the pytree structure."""
    arrays: List[Tuple[str, jax.Array]] = []
    descriptions = []
    for key, leaf in leaves:
        if isinstance(leaf, jax.ShapeDtypeStruct):
            raise TypeError(f"'{key}': a jax.ShapeDtypeStruct describes an array but holds no values to save")
        if is_key(leaf.dtype):
            impl = key_impl(leaf.dtype).name
            leaf = jax.random.key_data(leaf)
            description = array_description(key, "prng_key", leaf.shape, leaf.dtype, impl=impl)
        else:
            description = array_description(key, "array", leaf.shape, leaf.dtype)
        arrays.append((key, leaf))
        descriptions.append(description)
    jax.block_until_ready([array for _, array in arrays])
    chosen: List[Tuple[str, Tuple[int, ...], Tuple[int, ...], Any]] = []
    for key, array in arrays:
        lowest: Dict[Tuple[int, ...], Any] = {}
        for shard in array.addressable_shards:
            offset, _ = box_of(shard.index, array.shape)
            if offset not in lowest or shard.replica_id < lowest[offset].replica_id:
                lowest[offset] = shard
        chosen.extend((key, array.shape, offset, lowest[offset]) for offset in sorted(lowest))
    host = _host_copies([shard.data for _, _, _, shard in chosen])
    for (key, shape, offset, shard), data in zip(chosen, host):
        flags = _native.SHARD_COMPRESS if key in compressed else 0
        state.add_tensor(key, _dtypes.native(data), shape, offset, shard.replica_id, flags)
    return list(enumerate(descriptions))


def _key_data_sharding(sharding: Sharding, ndim: int, key_ndim: int) -> Sharding:
    """The sharding of the key data of typed keys laid out by `sharding` (its trailing dimensions whole)."""
    if isinstance(sharding, SingleDeviceSharding):
        return sharding
    if isinstance(sharding, NamedSharding):
        spec = list(sharding.spec) + [None] * (ndim - len(sharding.spec))
        return NamedSharding(sharding.mesh, PartitionSpec(*spec, *([None] * key_ndim)))
    raise TypeError(f"typed PRNG keys can be restored into a NamedSharding or a SingleDeviceSharding, not a "
                    f"{type(sharding).__name__}")


def register_for_restore(state: State, leaves: List[Tuple[str, Any]],
                         flags: int = 0) -> List[Callable[[Dict[str, Description]], jax.Array]]:
    """Registers one buffer per distinct box that this process's devices hold, with the shard `flags`, for each (key,
    jax.Array or jax.ShapeDtypeStruct) in `leaves`. Returns one finish(saved) per leaf, which builds the jax.Array
    once the load has filled the buffers (`saved` maps keys to their descriptions in the checkpoint's pytree)."""
    finishers: List[Callable[[Dict[str, Description]], jax.Array]] = []
    for key, target in leaves:
        shape: Tuple[int, ...] = tuple(target.shape)
        dtype: np.dtype[Any] = target.dtype
        sharding: Sharding = getattr(target, "sharding", None) or SingleDeviceSharding(jax.local_devices()[0])
        impl: Optional[KeyImpl] = None
        if is_key(dtype):
            impl = key_impl(dtype)
            sharding = _key_data_sharding(sharding, len(shape), len(impl.key_shape))
            shape, dtype = shape + tuple(impl.key_shape), np.dtype(np.uint32)
        buffers: Dict[Tuple[int, ...], npt.NDArray[Any]] = {}
        placement: List[Tuple[jax.Device, npt.NDArray[Any]]] = []
        for device, index in sharding.addressable_devices_indices_map(shape).items():
            assert index is not None  # jax's annotation allows None, but it gives every device its slices
            offset, extent = box_of(index, shape)
            if offset not in buffers:
                buffers[offset] = empty_aligned(extent, dtype)
                state.add_tensor(key, buffers[offset], shape, offset, flags=flags)
            placement.append((device, buffers[offset]))
        finishers.append(functools.partial(_assemble, key, shape, dtype, sharding, placement, impl))
    return finishers


def _assemble(key: str, shape: Tuple[int, ...], dtype: np.dtype[Any], sharding: Sharding,
              placement: List[Tuple[jax.Device, npt.NDArray[Any]]], impl: Optional[KeyImpl],
              saved: Dict[str, Description]) -> jax.Array:
    # On the CPU, device_put adopts a page-aligned buffer without a copy. A box held by several of this process's
    # devices is loaded once; each further device gets its own copy, so that no two arrays share memory (XLA may
    # write into a donated buffer).
    host: List[npt.NDArray[Any]] = []
    taken: Set[int] = set()
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
    keys: jax.Array = jax.random.wrap_key_data(array, impl=impl.name)
    return keys
