"""ckpt.Reader: any process, no collective and no context, reads a committed checkpoint: what it holds, any box of
any tensor, its common entries and metadata, and a full checksum verification."""

import ctypes
import os
from typing import NamedTuple, Tuple

import numpy as np

from . import _native, dtypes
from ._native import call, lib
from ._state import empty, encode_key


class CheckpointInfo(NamedTuple):
    format_version: Tuple[int, int]
    world_size: int  # ranks that saved it
    node_count: int
    tensor_count: int
    object_count: int
    common_count: int
    metadata_count: int
    file_count: int
    total_bytes: int  # bytes of tensor and object data


class ChunkInfo(NamedTuple):
    offset: Tuple[int, ...]  # the stored box
    shape: Tuple[int, ...]
    file: str  # relative to the checkpoint directory
    file_offset: int
    byte_length: int


class TensorInfo(NamedTuple):
    key: str
    dtype: np.dtype
    shape: Tuple[int, ...]
    chunks: Tuple[ChunkInfo, ...]


def _box(box, shape, key):
    """(offset, extent, kept) of a box given as a tuple of slices (step 1) or ints, one per dimension, None meaning
    the whole tensor; `kept` is the shape of the result, without the dimensions that an int selects (as numpy)."""
    if box is None:
        return (0,) * len(shape), tuple(shape), tuple(shape)
    if not isinstance(box, tuple):
        box = (box,)
    if len(box) != len(shape):
        raise ValueError(f"'{key}' has {len(shape)} dimensions; the box gives {len(box)}")
    offset, extent, kept = [], [], []
    for d, (part, length) in enumerate(zip(box, shape)):
        selects_one = isinstance(part, (int, np.integer))
        if selects_one:
            index = int(part) + length if int(part) < 0 else int(part)
            if not 0 <= index < length:
                raise IndexError(f"'{key}': index {int(part)} is out of bounds for dimension {d} of length {length}")
            part = slice(index, index + 1)
        if not isinstance(part, slice):
            raise TypeError(f"'{key}': box dimension {d} is a {type(part).__name__}, not a slice or an int")
        start, stop, step = part.indices(length)
        if step != 1:
            raise ValueError(f"'{key}': box dimension {d} has step {step}; only contiguous boxes can be read")
        offset.append(start)
        extent.append(max(0, stop - start))
        if not selects_one:
            kept.append(extent[-1])
    return tuple(offset), tuple(extent), tuple(kept)


class Reader:
    """A committed checkpoint opened for reading; its manifest is validated on open. Raises NotFoundError,
    CorruptError (a foreign, truncated or damaged MANIFEST) or VersionError."""

    def __init__(self, path):
        self.path = os.fspath(path)
        handle = ctypes.c_void_p()
        call("ckpt_reader_open", os.fsencode(self.path), ctypes.byref(handle))
        self._handle = handle
        self._tensors = None

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError(f"the ckpt.Reader of {self.path} is closed")
        return self._handle

    @property
    def info(self):
        raw = _native.new(_native.CheckpointInfo)
        call("ckpt_reader_info", self.handle, ctypes.byref(raw))
        return CheckpointInfo((raw.format_major, raw.format_minor), raw.world_size, raw.node_count, raw.tensor_count,
                              raw.object_count, raw.common_count, raw.metadata_count, raw.file_count,
                              raw.total_bytes)

    @property
    def tensors(self):
        """{key: TensorInfo} in key order: dtype, global shape and the stored chunks of every tensor."""
        if self._tensors is None:
            tensors = {}
            for index in range(self.info.tensor_count):
                raw = _native.new(_native.TensorInfo)
                call("ckpt_reader_tensor", self.handle, index, ctypes.byref(raw))
                chunks = []
                for chunk_index in range(raw.chunk_count):
                    c = _native.new(_native.ChunkInfo)
                    call("ckpt_reader_chunk", self.handle, index, chunk_index, ctypes.byref(c))
                    chunks.append(ChunkInfo(tuple(c.offset[:c.ndim]), tuple(c.shape[:c.ndim]), c.file.decode(),
                                            c.file_offset, c.byte_length))
                key = raw.key.decode()
                tensors[key] = TensorInfo(key, dtypes.dtype_of(raw.dtype), tuple(raw.shape[:raw.ndim]),
                                          tuple(chunks))
            self._tensors = tensors
        return dict(self._tensors)

    def chunks(self, key):
        """The stored chunks of tensor `key`."""
        return self._tensor(key).chunks

    def _tensor(self, key):
        info = self.tensors.get(key)
        if info is None:
            from .errors import NotFoundError
            raise NotFoundError(f"{self.path} has no tensor '{key}'")
        return info

    def read(self, key, box=None):
        """A new numpy array holding `box` of tensor `key` (a tuple of slices or ints, one per dimension, as in
        numpy indexing; None reads it whole). Every block read is checked against its checksum."""
        info = self._tensor(key)
        offset, extent, kept = _box(box, info.shape, key)
        out = empty(extent, info.dtype)
        call("ckpt_reader_read", self.handle, encode_key(key, "tensor key"), len(extent), _native.u64s(offset),
             _native.u64s(extent), out.ctypes.data if out.size else None, out.nbytes)
        return out.reshape(kept)

    @property
    def common(self):
        """{key: bytes}: every common entry."""
        out = {}
        for index in range(self.info.common_count):
            key, data, size = ctypes.c_char_p(), ctypes.c_void_p(), ctypes.c_uint64()
            call("ckpt_reader_common_at", self.handle, index, ctypes.byref(key), ctypes.byref(data),
                 ctypes.byref(size))
            out[key.value.decode()] = ctypes.string_at(data, size.value) if size.value else b""
        return out

    @property
    def metadata(self):
        """{key: value}: the user metadata saved with the checkpoint."""
        out = {}
        for index in range(self.info.metadata_count):
            key, value = ctypes.c_char_p(), ctypes.c_char_p()
            call("ckpt_reader_metadata_at", self.handle, index, ctypes.byref(key), ctypes.byref(value))
            out[key.value.decode()] = value.value.decode()
        return out

    def verify(self):
        """Reads every chunk and checks every checksum and file size; raises CorruptError naming the first tensor
        and file that fail."""
        call("ckpt_reader_verify", self.handle)

    def close(self):
        if self._handle is not None:
            lib.ckpt_reader_free(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None and lib._dll is not None:
            self.close()

    def __repr__(self):
        return f"ckpt.Reader({self.path!r})"
