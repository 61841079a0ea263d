"""ckpt.Reader: any process, no collective and no context, reads a committed checkpoint: what it holds, any box of
any tensor, its common entries and metadata, and a full checksum verification."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _dtypes, _native
from ._native import call, lib
from ._state import empty, encode_key
from ._types import StrPath
from .errors import NotFoundError

# A box of a tensor, as in numpy indexing: one slice (step 1) or int per dimension, or a single one for 1-d.
Box = Union[int, "np.integer[Any]", slice, Tuple[Union[int, "np.integer[Any]", slice], ...]]


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
    dtype: np.dtype[Any]
    shape: Tuple[int, ...]
    chunks: Tuple[ChunkInfo, ...]


def _box(box: Optional[Box], shape: Sequence[int], key: str) -> Tuple[Tuple[int, ...], Tuple[int, ...],
                                                                       Tuple[int, ...]]:
    """(offset, extent, kept) of a box given as a tuple of slices (step 1) or ints, one per dimension, None meaning
    the whole tensor; `kept` is the shape of the result, without the dimensions that an int selects (as numpy)."""
    if box is None:
        return (0,) * len(shape), tuple(shape), tuple(shape)
    parts = box if isinstance(box, tuple) else (box,)
    if len(parts) != len(shape):
        raise ValueError(f"'{key}' has {len(shape)} dimensions; the box gives {len(parts)}")
    offset: List[int] = []
    extent: List[int] = []
    kept: List[int] = []
    for d, (part, length) in enumerate(zip(parts, shape)):
        selects_one = isinstance(part, (int, np.integer))
        if isinstance(part, (int, np.integer)):
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

    def __init__(self, path: StrPath) -> None:
        self.path = os.fspath(path)
        handle = ctypes.c_void_p()
        call("ckpt_reader_open", os.fsencode(self.path), ctypes.byref(handle))
        self._handle: Optional[ctypes.c_void_p] = handle
        self._tensors: Optional[Dict[str, TensorInfo]] = None

    @property
    def handle(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise ValueError(f"the ckpt.Reader of {self.path} is closed")
        return self._handle

    @property
    def info(self) -> CheckpointInfo:
        raw = _native.new(_native.CheckpointInfo)
        call("ckpt_reader_info", self.handle, ctypes.byref(raw))
        return CheckpointInfo((raw.format_major, raw.format_minor), raw.world_size, raw.node_count, raw.tensor_count,
                              raw.object_count, raw.common_count, raw.metadata_count, raw.file_count,
                              raw.total_bytes)

    @property
    def tensors(self) -> Dict[str, TensorInfo]:
        """{key: TensorInfo} in key order: dtype, global shape and the stored chunks of every tensor."""
        if self._tensors is None:
            tensors: Dict[str, TensorInfo] = {}
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
                tensors[key] = TensorInfo(key, _dtypes.dtype_of(raw.dtype), tuple(raw.shape[:raw.ndim]),
                                          tuple(chunks))
            self._tensors = tensors
        return dict(self._tensors)

    def chunks(self, key: str) -> Tuple[ChunkInfo, ...]:
        """The stored chunks of tensor `key`."""
        return self._tensor(key).chunks

    def _tensor(self, key: str) -> TensorInfo:
        info = self.tensors.get(key)
        if info is None:
            raise NotFoundError(f"{self.path} has no tensor '{key}'")
        return info

    def read(self, key: str, box: Optional[Box] = None) -> npt.NDArray[Any]:
        """A new numpy array holding `box` of tensor `key` (a tuple of slices or ints, one per dimension, as in
        numpy indexing; None reads it whole). Every block read is checked against its checksum."""
        info = self._tensor(key)
        offset, extent, kept = _box(box, info.shape, key)
        out = empty(extent, info.dtype)
        call("ckpt_reader_read", self.handle, encode_key(key, "tensor key"), len(extent), _native.u64s(offset),
             _native.u64s(extent), out.ctypes.data if out.size else None, out.nbytes)
        return out.reshape(kept)

    @property
    def common(self) -> Dict[str, bytes]:
        """{key: bytes}: every common entry."""
        out: Dict[str, bytes] = {}
        for index in range(self.info.common_count):
            key, data, size = ctypes.c_char_p(), ctypes.c_void_p(), ctypes.c_uint64()
            call("ckpt_reader_common_at", self.handle, index, ctypes.byref(key), ctypes.byref(data),
                 ctypes.byref(size))
            out[_text(key)] = ctypes.string_at(data, size.value) if size.value else b""
        return out

    @property
    def metadata(self) -> Dict[str, str]:
        """{key: value}: the user metadata saved with the checkpoint."""
        out: Dict[str, str] = {}
        for index in range(self.info.metadata_count):
            key, value = ctypes.c_char_p(), ctypes.c_char_p()
            call("ckpt_reader_metadata_at", self.handle, index, ctypes.byref(key), ctypes.byref(value))
            out[_text(key)] = _text(value)
        return out

    def verify(self) -> None:
        """Reads every chunk and checks every checksum and file size; raises CorruptError naming the first tensor
        and file that fail."""
        call("ckpt_reader_verify", self.handle)

    def close(self) -> None:
        if self._handle is not None:
            lib.ckpt_reader_free(self._handle)
            self._handle = None

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None and lib.loaded:
            self.close()

    def __repr__(self) -> str:
        return f"ckpt.Reader({self.path!r})"


def _text(string: ctypes.c_char_p) -> str:
    """The text of a C string the library returned (never NULL where it succeeded)."""
    return (string.value or b"").decode()
