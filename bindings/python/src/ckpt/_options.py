"""The option structs of saves and loads (ckpt_save_options, ckpt_load_options), built from the arguments of
ckpt.save, ckpt.restore, CheckpointManager and JitSaver, with the C arrays and callbacks they point at."""

from __future__ import annotations

import collections.abc
import ctypes
import os
import sys
import traceback
from typing import AbstractSet, Any, Callable, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from . import _native
from ._state import encode_key
from ._types import KeyMap, Missing, Progress, StrPath, Tier

# The CKPT_STRICT_* of restore's `missing`.
MISSING = {"error": _native.STRICT_FAIL, "warn": _native.STRICT_LOG, "ignore": _native.STRICT_IGNORE}
# How many keys a message lists before it counts the rest.
_KEYS_LISTED = 8


def tier_code(tier: object) -> int:
    """The CKPT_TIER_* of a `tier` argument: "storage", "memory" or "both"."""
    try:
        return _native.TIERS[tier]  # type: ignore[index]  # any other value is the KeyError or TypeError below
    except (KeyError, TypeError):
        raise ValueError(f"tier must be 'storage', 'memory' or 'both', not {tier!r}") from None


def save_flags(in_place: object, copy_on_write: object = False, check_replicas: object = False,
               incremental: object = False, compress: object = False) -> int:
    """The CKPT_SAVE_* bits of the `in_place`, `copy_on_write`, `check_replicas`, `incremental` and `compress`
    arguments: each True or False."""
    flags = 0
    for name, value, bit in (("in_place", in_place, _native.SAVE_IN_PLACE),
                             ("copy_on_write", copy_on_write, _native.SAVE_COPY_ON_WRITE),
                             ("check_replicas", check_replicas, _native.SAVE_CHECK_REPLICAS),
                             ("incremental", incremental, _native.SAVE_INCREMENTAL),
                             ("compress", compress, _native.SAVE_COMPRESS)):
        if value not in (True, False):
            raise ValueError(f"{name} must be True or False, not {value!r}")
        flags |= bit if value else 0
    return flags


def compressed_keys(compress_keys: object) -> FrozenSet[str]:
    """The keys of a save's `compress_keys` argument (an iterable of str, not one str, whose characters would be
    taken for keys): the arrays whose shards get CKPT_SHARD_COMPRESS."""
    if isinstance(compress_keys, (str, bytes)) or not isinstance(compress_keys, collections.abc.Iterable):
        raise TypeError(f"compress_keys must be an iterable of keys (str), not a {type(compress_keys).__name__}")
    keys = frozenset(compress_keys)
    wrong = sorted(repr(key) for key in keys if not isinstance(key, str))
    if wrong:
        raise TypeError(f"compress_keys must hold keys (str), not {', '.join(wrong)}")
    return keys


def check_compressed(compressed: AbstractSet[str], array_keys: Sequence[str]) -> None:
    """Refuses (ValueError) a key of `compress_keys` that names none of the tree's arrays (`array_keys`): a misspelt
    key would otherwise leave its array uncompressed without a word."""
    unknown = sorted(compressed - set(array_keys))
    if unknown:
        raise ValueError(f"compress_keys names {len(unknown)} keys that are no array of the tree: {_listed(unknown)}; "
                         f"the tree's arrays: {_listed(list(array_keys))}")


def load_flags(allow_dtype_cast: bool) -> int:
    """The shard flags of a restore's targets: with `allow_dtype_cast`, a target leaf of another floating dtype than
    the checkpoint's (float16, bfloat16, float32, float64) receives the stored values converted."""
    return _native.SHARD_ALLOW_DTYPE_CAST if allow_dtype_cast else 0


def progress_callback(progress: Optional[Progress]) -> Optional[_native.CFunction]:
    """A ckpt_progress_fn that calls progress(phase, done, total), the phase by name ("planning", "staging",
    "writing", "committing", "committed"; "reading", "loaded"; "failed"); None without a callable. The first
    exception it raises is printed and ends the calls: none may unwind through the library."""
    if progress is None:
        return None
    if not callable(progress):
        raise TypeError(f"progress must be a callable (phase, done, total), not a {type(progress).__name__}")
    failed: List[bool] = []

    def trampoline(_user: Optional[int], phase: int, done: int, total: int) -> None:
        if failed:
            return
        try:
            progress(_native.PHASES.get(phase, str(phase)), done, total)
        except BaseException:
            failed.append(True)
            print("ckpt: the progress callback raised, and is called no more for this request:", file=sys.stderr)
            traceback.print_exc()

    return _native.PROGRESS_FN(trampoline)


class SaveOptions:
    """ckpt_save_options for user metadata (a str -> str mapping), a progress callable, a tier, the in_place,
    copy_on_write, check_replicas, incremental and compress flags and an incremental save's base checkpoint, with the
    C arrays, the C callback and the C string they point at. A copy-on-write save, or one that checks replicas, also
    keeps here the buffers it reads (`buffers`) until its request finishes: the library may read them after the
    call."""

    def __init__(self, metadata: Optional[Mapping[str, str]], progress: Optional[Progress], tier: Tier,
                 in_place: bool = False, copy_on_write: bool = False, check_replicas: bool = False,
                 incremental: bool = False, base: Optional[StrPath] = None, compress: bool = False) -> None:
        self.struct = _native.new(_native.SaveOptions, tier=tier_code(tier),
                                  flags=save_flags(in_place, copy_on_write, check_replicas, incremental, compress))
        # The struct points into these bytes: they live as long as the options, past the call that reads them.
        self._base = None if base is None else os.fsencode(os.fspath(base))
        self.struct.base = self._base
        # The library may read the buffers after the call: copy-on-write saves and the replicas a save checks.
        self.reads_after_call = copy_on_write or check_replicas
        self.buffers: List[Any] = []
        self._progress = progress_callback(progress)
        if self._progress is not None:
            self.struct.progress = self._progress
        if not metadata:
            return
        keys, values = [], []
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"metadata must map str to str; got {type(key).__name__} -> {type(value).__name__}")
            keys.append(encode_key(key, "metadata key"))
            values.append(encode_key(value, f"metadata {key!r}: value"))
        self._keys = (ctypes.c_char_p * len(keys))(*keys)
        self._values = (ctypes.c_char_p * len(values))(*values)
        self.struct.metadata_count = len(keys)
        self.struct.metadata_keys = self._keys
        self.struct.metadata_values = self._values


def missing_code(missing: object) -> int:
    """The CKPT_STRICT_* of a `missing` argument: "error", "warn" or "ignore"."""
    try:
        return MISSING[missing]  # type: ignore[index]  # any other value is the KeyError or TypeError below
    except (KeyError, TypeError):
        raise ValueError(f"missing must be 'error', 'warn' or 'ignore', not {missing!r}") from None


def _listed(keys: Sequence[str]) -> str:
    """The first few of `keys`, quoted: 'a', 'b' and 3 more."""
    text = ", ".join(f"'{key}'" for key in keys[:_KEYS_LISTED])
    return text + (f" and {len(keys) - _KEYS_LISTED} more" if len(keys) > _KEYS_LISTED else "")


def key_map_pairs(key_map: Optional[KeyMap], keys: Sequence[str]) -> List[Tuple[str, str]]:
    """(target key, checkpoint key) for each of the target's `keys` that `key_map` sends to another key: a dict
    (naming only keys the target has: one it lacks is a misspelt key, ValueError) or a callable (target key ->
    checkpoint key, or None for the key itself)."""
    if key_map is None:
        return []
    saved_of: Callable[[str], Optional[str]]
    if isinstance(key_map, Mapping):
        known = set(keys)
        unknown = [key for key in key_map if key not in known]
        if unknown:
            raise ValueError(f"key_map names {len(unknown)} keys the target does not have: {_listed(unknown)}; the "
                             f"target's keys: {_listed(list(keys))}")
        saved_of = key_map.get
    elif callable(key_map):
        saved_of = key_map
    else:
        raise TypeError(f"key_map must be a dict (target key -> checkpoint key) or a callable, not a "
                        f"{type(key_map).__name__}")
    pairs = []
    for key in keys:
        saved = saved_of(key)
        if saved is not None and not isinstance(saved, str):
            raise TypeError(f"key_map gives a {type(saved).__name__} for '{key}': the checkpoint's key must be a str "
                            f"(or None, from a callable, for the key itself)")
        if saved is not None and saved != key:
            pairs.append((key, saved))
    return pairs


def load_options(partial: bool, progress: Optional[Progress], missing: Missing = "error",
                 pairs: Sequence[Tuple[str, str]] = ()) -> Tuple[_native.LoadOptions, List[object]]:
    """ckpt_load_options, and what they point at: the C callback and the key map's C array, from key_map_pairs
    (keep it referenced until the load returned)."""
    opts = _native.new(_native.LoadOptions, missing_keys=missing_code(missing),
                       unexpected_keys=_native.STRICT_IGNORE if partial else _native.STRICT_FAIL)
    referenced: List[object] = []
    c_progress = progress_callback(progress)
    if c_progress is not None:
        opts.progress = c_progress
        referenced.append(c_progress)
    if pairs:
        keys = [encode_key(key, "key_map key") for pair in pairs for key in pair]
        c_keys = (ctypes.c_char_p * len(keys))(*keys)
        opts.key_map = c_keys
        opts.key_map_count = len(pairs)
        referenced.append(c_keys)
    return opts, referenced
