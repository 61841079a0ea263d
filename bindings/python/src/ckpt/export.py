"""Export of a committed checkpoint to safetensors (ckpt_export in ckpt.h)."""

from __future__ import annotations

import ctypes
import os
from typing import Iterable, Optional, Tuple

import numpy.typing as npt

from . import _dtypes, _native
from ._native import call
from ._state import encode_key
from ._types import StrPath

DEFAULT_MAX_SHARD_SIZE = 5_000_000_000


def export(checkpoint: StrPath, out: StrPath, *, max_shard_size: int = DEFAULT_MAX_SHARD_SIZE,
           keys: Optional[Iterable[str]] = None, part: Tuple[int, int] = (0, 1),
           dtype: Optional[npt.DTypeLike] = None) -> None:
    """Writes the tensors of the committed checkpoint at `checkpoint` as safetensors, each whole whatever layout
    saved it. `out` ending in ".safetensors" is one file; otherwise it is a directory in the Hugging Face layout:
    model.safetensors when everything fits in `max_shard_size` bytes (0: no limit), else numbered files
    (model-00001-of-0000N.safetensors) and model.safetensors.index.json. `keys` selects tensors (default: all).
    `part=(i, n)` shares one export among n processes: each writes every n-th file, part 0 also the index. `dtype`
    (a numpy or ml_dtypes floating type, e.g. ml_dtypes.bfloat16) converts the floating tensors to it (round to
    nearest even), leaving the others as stored. `checkpoint` may also be safetensors weights.
    Existing files are never replaced (AlreadyExistsError). Objects and common entries are not exported."""
    options = _native.new(_native.ExportOptions, max_shard_bytes=max_shard_size, part_index=part[0],
                          part_count=part[1], dtype=0 if dtype is None else _dtypes.code_of(dtype))
    names = [encode_key(key, "tensor key") for key in (keys or [])]
    array = (ctypes.c_char_p * max(len(names), 1))(*names)
    if names:
        options.keys = ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p))
        options.key_count = len(names)
    call("ckpt_export", os.fsencode(os.fspath(checkpoint)), os.fsencode(os.fspath(out)), ctypes.byref(options))
