"""A ckpt_state_t being filled, with the numpy buffers it points at kept alive while the library may use them."""

from __future__ import annotations

import ctypes
import mmap
from typing import Any, Iterable, List, Optional, Sequence

import numpy as np
import numpy.typing as npt

from . import _dtypes, _native, _page_pool
from ._native import call, call_status, lib
from .errors import InvalidArgumentError, NotFoundError


def encode_key(text: str, what: str = "key") -> bytes:
    """`text` (a str) as the library takes keys, metadata keys and values: UTF-8, without NUL. A NUL would cut the C
    string short (silently making another key) and a lone surrogate (a pytree path may hold one, from bytes decoded
    with surrogateescape) has no UTF-8 form: either raises InvalidArgumentError naming `what` and the text."""
    if "\0" in text:
        raise InvalidArgumentError(f"{what} {text!r} contains a NUL character; ckpt takes UTF-8 text without NUL")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"{what} {text!r} is not valid Unicode text ({e.reason} at position {e.start}); "
                                   f"ckpt takes UTF-8 text without NUL") from None


class State:
    def __init__(self) -> None:
        handle = ctypes.c_void_p()
        call("ckpt_state_create", ctypes.byref(handle))
        self.handle: Optional[ctypes.c_void_p] = handle
        self._buffers: List[npt.NDArray[Any]] = []

    def add_tensor(self, key: str, data: npt.NDArray[Any], global_shape: Sequence[int], offset: Sequence[int],
                   replica: int = 0, flags: int = 0) -> None:
        """Registers `data` (a native-order, C-contiguous numpy array, not copied) as the box at `offset` of the
        global tensor `key`."""
        ndim = len(global_shape)
        global_shape_c = _native.u64s(global_shape)
        local_shape_c = _native.u64s(data.shape)
        offset_c = _native.u64s(offset)
        replica_c = (_native.c_u32 * 1)(replica)
        shard = _native.new(_native.TensorShard, key=encode_key(key, "tensor key"), dtype=_dtypes.code_of(data.dtype),
                            ndim=ndim, global_shape=global_shape_c, local_shape=local_shape_c, global_offset=offset_c,
                            replica_ndim=1 if replica else 0, replica_id=replica_c, flags=flags,
                            memory_kind=_native.MEMORY_HOST, data=data.ctypes.data if data.size else None,
                            data_size=data.nbytes)
        call("ckpt_state_add_tensor", self.handle, ctypes.byref(shard))
        self._buffers.append(data)

    def add_common(self, key: str, value: bytes) -> None:
        call("ckpt_state_add_common", self.handle, encode_key(key, "common key"), value, len(value))

    def common(self, key: str) -> Optional[bytes]:
        """The common bytes a load brought under `key`, or None."""
        data = ctypes.c_void_p()
        size = ctypes.c_uint64()
        found = call_status("ckpt_state_common", self.handle, encode_key(key, "common key"), ctypes.byref(data),
                            ctypes.byref(size), accepted=(0, NotFoundError.status))
        if found != 0:
            return None
        return ctypes.string_at(data, size.value) if size.value else b""

    def close(self) -> None:
        if self.handle is not None:
            lib.ckpt_state_free(self.handle)
            self.handle = None
            self._buffers.clear()

    def __enter__(self) -> State:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Buffers at least this large come from the process's page pool (_page_pool.py): page-aligned, present before the
# load writes them, and reusing the pages of arrays freed a moment ago; smaller ones come from numpy's allocator.
_POOLED_BYTES = 1 << 20


def empty(shape: Iterable[int], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """A new native C-contiguous array to load into; large ones start on a page boundary, with their pages present
    (JAX's CPU client adopts such a buffer without copying it), from the page pool."""
    native = np.dtype(dtype).newbyteorder("=")
    dims = tuple(int(n) for n in shape)
    size = int(np.prod(dims, dtype=np.int64)) * native.itemsize
    if size < _POOLED_BYTES:
        return np.empty(dims, dtype=native)
    return _page_pool.POOL.array(size).view(native).reshape(dims)


def empty_aligned(shape: Iterable[int], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """As empty(), always starting on a page boundary, whatever the size."""
    native = np.dtype(dtype).newbyteorder("=")
    dims = tuple(int(n) for n in shape)
    size = int(np.prod(dims, dtype=np.int64)) * native.itemsize
    if size >= _POOLED_BYTES:
        return empty(dims, native)
    raw = np.empty(size + mmap.PAGESIZE, dtype=np.uint8)
    start = (-raw.ctypes.data) % mmap.PAGESIZE
    return raw[start:start + size].view(native).reshape(dims)
