"""numpy element types and the CKPT_DTYPE_* codes of the C library. The machine-learning types (bfloat16, the
float8 and float4 families, int4, int2) come from ml_dtypes, as JAX's do; sub-byte types are stored one element per
byte, as numpy holds them."""

from __future__ import annotations

import types
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

ml_dtypes: Optional[types.ModuleType]
try:
    import ml_dtypes
except ImportError:  # numpy's own types still work; the others are named in the error that needs them
    ml_dtypes = None

# (CKPT_DTYPE_* code, numpy type or ml_dtypes attribute name). Pinned numbers: they never change.
_CODES: List[Tuple[int, Union[type, str]]] = [
    (1, np.bool_),
    (2, np.uint8),
    (3, np.int8),
    (4, np.int16),
    (5, np.uint16),
    (6, np.int32),
    (7, np.uint32),
    (8, np.int64),
    (9, np.uint64),
    (10, np.float16),
    (11, "bfloat16"),
    (12, np.float32),
    (13, np.float64),
    (14, np.complex64),
    (15, "float8_e4m3fn"),
    (16, "float8_e5m2"),
    (17, np.complex128),
    (18, "float8_e4m3fnuz"),
    (19, "float8_e5m2fnuz"),
    (20, "float8_e4m3b11fnuz"),
    (21, "float8_e3m4"),
    (22, "float8_e4m3"),
    (23, "float8_e8m0fnu"),
    (24, "float4_e2m1fn"),
    (25, "int4"),
    (26, "uint4"),
    (27, "int2"),
    (28, "uint2"),
]


def _resolve(kind: Union[type, str]) -> Optional[np.dtype[Any]]:
    if not isinstance(kind, str):
        return np.dtype(kind)
    found = getattr(ml_dtypes, kind, None) if ml_dtypes is not None else None
    return np.dtype(found) if found is not None else None


_TO_CODE: Dict[np.dtype[Any], int] = {}
_FROM_CODE: Dict[int, np.dtype[Any]] = {}
_MISSING: Dict[int, str] = {}  # code -> ml_dtypes name, for types this ml_dtypes lacks
for _code, _kind in _CODES:
    _dtype = _resolve(_kind)
    if _dtype is None:
        _MISSING[_code] = str(_kind)
        continue
    _TO_CODE[_dtype] = _code
    _FROM_CODE[_code] = _dtype


def code_of(dtype: npt.DTypeLike) -> int:
    """The CKPT_DTYPE_* code of a numpy dtype (any byte order); TypeError for a type ckpt cannot store."""
    resolved = np.dtype(dtype)
    code = _TO_CODE.get(resolved.newbyteorder("=") if resolved.byteorder not in ("=", "|") else resolved)
    if code is None:
        raise TypeError(f"ckpt cannot store elements of type {resolved}: use one of "
                        f"{', '.join(sorted(str(d) for d in _TO_CODE))}")
    return code


def dtype_of(code: int) -> np.dtype[Any]:
    """The numpy dtype of a CKPT_DTYPE_* code; TypeError for an unknown one or one this ml_dtypes lacks."""
    dtype = _FROM_CODE.get(code)
    if dtype is None:
        if code in _MISSING:
            raise TypeError(f"the checkpoint holds ml_dtypes.{_MISSING[code]} elements, which the installed "
                            f"ml_dtypes {getattr(ml_dtypes, '__version__', '(none)')} lacks: upgrade ml_dtypes")
        raise TypeError(f"unknown ckpt dtype code {code}: the checkpoint was written by a newer ckpt")
    return dtype


def native(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`array` in native byte order, C-contiguous: as the library expects it (a copy only where needed)."""
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "<" and np.little_endian is False):
        array = array.astype(array.dtype.newbyteorder("="))
    return array if array.flags.c_contiguous else array.copy(order="C")  # (ascontiguousarray turns 0-d into 1-d)
