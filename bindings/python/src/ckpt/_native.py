"""Finds and loads libckpt, and declares the part of its C ABI (include/ckpt.h) that this package calls.

The structs below restate the header's layout; tests/test_abi.py checks every size, offset and constant against the
ABI table the C build generates from ckpt.h, so a drift fails a test instead of corrupting memory. Every struct is passed with this
package's own struct_size (never through the library's *_init functions), so a newer library keeps the defaults of
fields this package does not know.
"""

from __future__ import annotations

import _ctypes
import ctypes
import ctypes.util
import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import threading
from typing import Any, Callable, Collection, Dict, Iterator, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from . import errors

LIBRARY_NAME = "libckpt.so.0"
ABI_MAJOR = 0  # CKPT_VERSION_MAJOR this package was written for
MAX_NDIM = 8

# The CKPT_OK and CKPT_E_IN_PROGRESS statuses, which are no failure (the others are ckpt.errors' classes).
OK = 0
IN_PROGRESS = 13

c_u32 = ctypes.c_uint32
c_i32 = ctypes.c_int32
c_u64 = ctypes.c_uint64
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
u64_array = ctypes.POINTER(c_u64)

ALLGATHER_FN = ctypes.CFUNCTYPE(c_i32, c_void_p, c_void_p, c_u64, c_void_p)
# ckpt_collectives' functions: allgatherv, alltoallv, broadcast and barrier.
ALLGATHERV_FN = ctypes.CFUNCTYPE(c_i32, c_void_p, c_void_p, c_u64, c_void_p, u64_array, u64_array)
ALLTOALLV_FN = ctypes.CFUNCTYPE(c_i32, c_void_p, c_void_p, u64_array, u64_array, c_void_p, u64_array, u64_array)
BROADCAST_FN = ctypes.CFUNCTYPE(c_i32, c_void_p, c_void_p, c_u64, c_i32)
BARRIER_FN = ctypes.CFUNCTYPE(c_i32, c_void_p)
LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_i32, c_char_p)
PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_i32, c_u64, c_u64)
# What each of the *_FN types above makes of a Python function: a C function pointer, alive while referenced (ctypes
# calls its base class ctypes._CFuncPtr).
CFunction = _ctypes.CFuncPtr

# CKPT_PHASE_*, by their number: the names ckpt.save's and ckpt.restore's progress callables receive.
PHASES = {0: "planning", 1: "staging", 2: "writing", 3: "committing", 4: "committed", 5: "reading", 6: "loaded",
          7: "failed"}

TRANSPORT_DEFAULT = -1
TRANSPORTS = {"auto": 0, "none": 1, "ucx": 2, "nccl": 3}
# ckpt_context_stats.last_load_reads: how the last load read its tensors (0: no load yet).
LOAD_READS = {"once": 1, "own": 2}

STRICT_FAIL = 0
STRICT_LOG = 1
STRICT_IGNORE = 2

SHARD_FLATTENED = 0x1
SHARD_ALLOW_SHAPE_MISMATCH = 0x2
SHARD_ALLOW_DTYPE_CAST = 0x4
SHARD_COMPRESS = 0x8

MEMORY_HOST = 0

# CKPT_TIER_*, by the names ckpt.save's and CheckpointManager.save's `tier` takes.
TIERS = {"storage": 0, "memory": 1, "both": 2}

# CKPT_BEST_*, by the names CheckpointManager's `best_mode` takes.
BEST_MODES = {"max": 0, "min": 1}

# CKPT_SAVE_* bits of ckpt_save_options.flags: ckpt.save's and CheckpointManager.save's `in_place`,
# `copy_on_write`, `check_replicas`, `incremental` and `compress`.
SAVE_IN_PLACE = 0x1
SAVE_COPY_ON_WRITE = 0x2
SAVE_CHECK_REPLICAS = 0x4
SAVE_INCREMENTAL = 0x8
SAVE_COMPRESS = 0x10


class Collectives(ctypes.Structure):
    """The job's own collectives (ckpt_collectives), which ckpt.Context(collectives=...) fills."""
    _fields_ = [
        ("struct_size", c_u32),
        ("user", c_void_p),
        ("allgatherv", ALLGATHERV_FN),
        ("alltoallv", ALLTOALLV_FN),
        ("broadcast", BROADCAST_FN),
        ("barrier", BARRIER_FN),
    ]


class ContextOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("rank", c_i32),
        ("world_size", c_i32),
        ("local_rank", c_i32),
        ("store_host", c_char_p),
        ("store_port", c_i32),
        ("timeout_ms", c_u32),
        ("allgather", ALLGATHER_FN),
        ("allgather_user", c_void_p),
        ("node_name", c_char_p),
        ("log", LOG_FN),
        ("log_user", c_void_p),
        ("io_workers", c_i32),
        ("arena_bytes", c_u64),
        ("transport", c_i32),
        ("collectives", ctypes.POINTER(Collectives)),
    ]


class ContextStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("io_workers", c_u32),
        ("arena_bytes", c_u64),
        ("saves_committed", c_u64),
        ("plans_computed", c_u64),
        ("plans_reused", c_u64),
        ("bytes_staged", c_u64),
        ("bytes_written", c_u64),
        ("bytes_read", c_u64),
        ("bytes_sent", c_u64),
        ("bytes_received", c_u64),
        ("transport", c_i32),
        ("exchange_ns", c_u64),
        ("control_bytes_sent", c_u64),
        ("control_bytes_received", c_u64),
        ("store_collectives", c_u64),
        ("last_load_reads", c_u64),
        ("last_load_read_amplification_milli", c_u64),
    ]


class TensorShard(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("key", c_char_p),
        ("dtype", c_i32),
        ("ndim", c_u32),
        ("global_shape", u64_array),
        ("local_shape", u64_array),
        ("global_offset", u64_array),
        ("replica_ndim", c_u32),
        ("replica_id", ctypes.POINTER(c_u32)),
        ("flags", c_u32),
        ("flat_start", c_u64),
        ("flat_end", c_u64),
        ("memory_kind", c_i32),
        ("device", c_i32),
        ("data", c_void_p),
        ("data_size", c_u64),
    ]


class SaveOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("metadata_count", c_u32),
        ("metadata_keys", ctypes.POINTER(c_char_p)),
        ("metadata_values", ctypes.POINTER(c_char_p)),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("tier", c_u64),
        ("flags", c_u64),
        ("metrics", c_char_p),
        ("best_value", ctypes.c_double),
        ("has_best_value", c_u64),
        ("base", c_char_p),
    ]


class RequestStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("committed", c_u32),
        ("state_bytes", c_u64),
        ("bytes_to_write", c_u64),
        ("bytes_staged", c_u64),
        ("bytes_written", c_u64),
        ("bytes_committed", c_u64),
        ("files_written", c_u64),
        ("planning_ns", c_u64),
        ("staging_ns", c_u64),
        ("blocking_ns", c_u64),
        ("writing_ns", c_u64),
        ("committing_ns", c_u64),
        ("total_ns", c_u64),
    ]


class LoadOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("missing_keys", c_i32),
        ("unexpected_keys", c_i32),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("key_map", ctypes.POINTER(c_char_p)),
        ("key_map_count", c_u64),
    ]


class ManagerOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("keep_last", c_u32),
        ("keep_every", c_u64),
        ("memory_tier", c_u32),
        ("storage_every", c_u64),
        ("keep_best", c_u32),
        ("best_mode", c_i32),
        ("keep_for_seconds", c_u64),
    ]


class CheckpointInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("format_major", c_u32),
        ("format_minor", c_u32),
        ("world_size", c_u32),
        ("node_count", c_u32),
        ("tensor_count", c_u64),
        ("object_count", c_u64),
        ("common_count", c_u64),
        ("metadata_count", c_u64),
        ("file_count", c_u64),
        ("total_bytes", c_u64),
    ]


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("key", c_char_p),
        ("dtype", c_i32),
        ("ndim", c_u32),
        ("shape", c_u64 * MAX_NDIM),
        ("chunk_count", c_u64),
    ]


class ChunkInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("ndim", c_u32),
        ("offset", c_u64 * MAX_NDIM),
        ("shape", c_u64 * MAX_NDIM),
        ("file", c_char_p),
        ("file_offset", c_u64),
        ("byte_length", c_u64),
    ]


class ExportOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("max_shard_bytes", c_u64),
        ("keys", ctypes.POINTER(c_char_p)),
        ("key_count", c_u64),
        ("part_index", c_u32),
        ("part_count", c_u32),
        ("dtype", c_i32),
    ]


Struct = TypeVar("Struct", bound=ctypes.Structure)


def new(struct_type: Type[Struct], **fields: Any) -> Struct:
    """A struct with its struct_size set to this package's size; other fields zero unless given."""
    value = struct_type(**fields)
    value.struct_size = ctypes.sizeof(struct_type)
    return value


def u64s(values: Sequence[int]) -> ctypes.Array[ctypes.c_uint64]:
    """A C array of uint64_t holding `values` (kept alive by the caller for the duration of the call)."""
    return (c_u64 * max(len(values), 1))(*values)


# (name, return type, argument types): every function this package calls. Each that takes a ckpt_error_t* has it
# last, and returns an int32_t status.
_ERR = c_void_p
_SIGNATURES: List[Tuple[str, Any, List[Any]]] = [
    ("ckpt_version_number", c_u32, []),
    ("ckpt_version_string", c_char_p, []),
    ("ckpt_status_string", c_char_p, [c_i32]),
    ("ckpt_error_create", c_i32, [ctypes.POINTER(c_void_p)]),
    ("ckpt_error_free", None, [c_void_p]),
    ("ckpt_error_message", c_char_p, [c_void_p]),
    ("ckpt_context_create", c_i32, [ctypes.POINTER(ContextOptions), ctypes.POINTER(c_void_p), _ERR]),
    ("ckpt_context_free", None, [c_void_p]),
    ("ckpt_context_rank", c_i32, [c_void_p]),
    ("ckpt_context_world_size", c_i32, [c_void_p]),
    ("ckpt_context_local_rank", c_i32, [c_void_p]),
    ("ckpt_context_stats_get", c_i32, [c_void_p, ctypes.POINTER(ContextStats), _ERR]),
    ("ckpt_dtype_size", c_u32, [c_i32]),
    ("ckpt_dtype_name", c_char_p, [c_i32]),
    ("ckpt_state_create", c_i32, [ctypes.POINTER(c_void_p), _ERR]),
    ("ckpt_state_free", None, [c_void_p]),
    ("ckpt_state_add_tensor", c_i32, [c_void_p, ctypes.POINTER(TensorShard), _ERR]),
    ("ckpt_state_add_common", c_i32, [c_void_p, c_char_p, c_void_p, c_u64, _ERR]),
    ("ckpt_state_common", c_i32, [c_void_p, c_char_p, ctypes.POINTER(c_void_p), ctypes.POINTER(c_u64), _ERR]),
    ("ckpt_save", c_i32,
     [c_void_p, c_void_p, c_char_p, ctypes.POINTER(SaveOptions), ctypes.POINTER(c_void_p), _ERR]),
    ("ckpt_request_test", c_i32, [c_void_p, _ERR]),
    ("ckpt_request_wait", c_i32, [c_void_p, c_u32, _ERR]),
    ("ckpt_request_free", None, [c_void_p]),
    ("ckpt_request_stats_get", c_i32, [c_void_p, ctypes.POINTER(RequestStats), _ERR]),
    ("ckpt_load", c_i32, [c_void_p, c_void_p, c_char_p, ctypes.POINTER(LoadOptions), _ERR]),
    ("ckpt_manager_open", c_i32,
     [c_void_p, c_char_p, ctypes.POINTER(ManagerOptions), ctypes.POINTER(c_void_p), _ERR]),
    ("ckpt_manager_free", None, [c_void_p]),
    ("ckpt_manager_close", c_i32, [c_void_p, _ERR]),
    ("ckpt_manager_save", c_i32,
     [c_void_p, c_void_p, c_u64, ctypes.POINTER(SaveOptions), ctypes.POINTER(c_void_p), _ERR]),
    ("ckpt_manager_latest", c_i32, [c_void_p, ctypes.POINTER(c_u64), _ERR]),
    ("ckpt_manager_load_latest", c_i32,
     [c_void_p, c_void_p, ctypes.POINTER(LoadOptions), ctypes.POINTER(c_u64), _ERR]),
    ("ckpt_manager_resume_step", c_i32, [c_void_p, ctypes.POINTER(c_u64), _ERR]),
    ("ckpt_manager_steps", c_i32, [c_void_p, u64_array, c_u64, ctypes.POINTER(c_u64), _ERR]),
    ("ckpt_manager_step_path", c_i32, [c_void_p, c_u64, c_char_p, c_u64, _ERR]),
    ("ckpt_manager_metrics", c_i32, [c_void_p, c_u64, c_char_p, c_u64, ctypes.POINTER(c_u64), _ERR]),
    ("ckpt_manager_wait", c_i32, [c_void_p, _ERR]),
    ("ckpt_reader_open", c_i32, [c_char_p, ctypes.POINTER(c_void_p), _ERR]),
    ("ckpt_reader_free", None, [c_void_p]),
    ("ckpt_reader_info", c_i32, [c_void_p, ctypes.POINTER(CheckpointInfo), _ERR]),
    ("ckpt_reader_tensor", c_i32, [c_void_p, c_u64, ctypes.POINTER(TensorInfo), _ERR]),
    ("ckpt_reader_chunk", c_i32, [c_void_p, c_u64, c_u64, ctypes.POINTER(ChunkInfo), _ERR]),
    ("ckpt_reader_read", c_i32, [c_void_p, c_char_p, c_u32, u64_array, u64_array, c_void_p, c_u64, _ERR]),
    ("ckpt_reader_common_at", c_i32,
     [c_void_p, c_u64, ctypes.POINTER(c_char_p), ctypes.POINTER(c_void_p), ctypes.POINTER(c_u64), _ERR]),
    ("ckpt_reader_metadata_at", c_i32,
     [c_void_p, c_u64, ctypes.POINTER(c_char_p), ctypes.POINTER(c_char_p), _ERR]),
    ("ckpt_reader_verify", c_i32, [c_void_p, _ERR]),
    ("ckpt_export", c_i32, [c_char_p, c_char_p, ctypes.POINTER(ExportOptions), _ERR]),
]


def _library_candidates() -> Iterator[Tuple[str, pathlib.Path]]:
    """Where libckpt may be, in the order searched: (where the path came from, path), each path once."""
    package_dir = pathlib.Path(__file__).resolve().parent
    candidates: List[Tuple[str, pathlib.Path]] = [("this package (the wheel)", package_dir / "_lib" / LIBRARY_NAME)]
    # Imported from a checkout (bindings/python/src/ckpt, as a development install does): that checkout's build tree.
    checkout = package_dir.parents[3] if len(package_dir.parents) > 3 else None
    if checkout is not None and (checkout / "include" / "ckpt.h").is_file():
        candidates.append(("this checkout's build tree", checkout / "build" / "runtime" / LIBRARY_NAME))
    # The package installed into the same prefix as the library (site-packages sits under <prefix>/lib/pythonX.Y).
    prefixes = [pathlib.Path(sys.prefix)] + [lib.parent for lib in package_dir.parents if lib.name in ("lib", "lib64")]
    multiarch: str = getattr(sys.implementation, "_multiarch", "") or ""
    libdirs = ["lib", "lib64"] + ([f"lib/{multiarch}"] if multiarch else [])
    for prefix in prefixes:
        candidates += [(f"install prefix {prefix}", prefix / libdir / LIBRARY_NAME) for libdir in libdirs]
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--variable=libdir", "ckpt"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            candidates.append(("pkg-config ckpt", pathlib.Path(found.stdout.strip()) / LIBRARY_NAME))
    seen = set()
    for source, path in candidates:
        if path not in seen:
            seen.add(path)
            yield source, path


def library_path() -> pathlib.Path:
    """The libckpt this process uses: CKPT_LIB (a file, or a directory holding it), else the first found of the one
    this package carries (the wheel's), its checkout's build tree, its install prefix, pkg-config and the linker's
    path. Raises LibraryNotFoundError naming what was tried."""
    explicit = os.environ.get("CKPT_LIB")
    if explicit:
        path = pathlib.Path(explicit)
        if path.is_dir():
            path = path / LIBRARY_NAME
        if not path.is_file():
            raise errors.LibraryNotFoundError(f"CKPT_LIB={explicit}: {path} is not a file")
        return path
    tried: List[str] = []
    for source, path in _library_candidates():
        if path.is_file():
            return path
        tried.append(f"{path} ({source})")
    linker_name = ctypes.util.find_library("ckpt")  # a bare name such as libckpt.so.0, which dlopen resolves
    if linker_name:
        return pathlib.Path(linker_name)
    tried.append("the linker's search path (ldconfig, LD_LIBRARY_PATH)")
    raise errors.LibraryNotFoundError(
        "libckpt not found: install the ckpt wheel (pip install ckpt-*.whl), or set CKPT_LIB to the library "
        "(build/runtime/libckpt.so in a build tree), or install it (cmake --install, the .deb) where pkg-config or "
        "the linker finds it. Tried: " + "; ".join(tried))


def _load_ucx_from_its_wheel() -> None:
    """Where NVIDIA's UCX wheel is installed (`pip install ckpt[ucx-cu12]` or `[ucx-cu13]`), loads its libraries, so
    that libckpt's run-time dlopen of libucp.so.0 finds them by name: a pip-only environment exchanges over UCX too.
    Without it, libckpt loads the system's UCX where there is one, else loads without a transport."""
    try:
        libucx = importlib.import_module("libucx")
    except ImportError:
        return
    libucx.load_library()


class _Library:
    """libckpt, loaded on first use (importing the package needs no library)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dll: Optional[ctypes.CDLL] = None
        self._path: Optional[pathlib.Path] = None

    def _load(self) -> ctypes.CDLL:
        path = library_path()
        _load_ucx_from_its_wheel()
        try:
            # RTLD_GLOBAL: the XLA FFI handler library links libckpt too and must bind to this same copy.
            dll = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise errors.LibraryNotFoundError(f"cannot load libckpt from {path}: {e}") from e
        dll.ckpt_version_string.restype = c_char_p
        version: str = dll.ckpt_version_string().decode()
        for name, restype, argtypes in _SIGNATURES:
            try:
                fn = getattr(dll, name)
            except AttributeError:
                raise errors.LibraryNotFoundError(
                    f"{path} (libckpt {version}) has no {name}: it is older than this package") from None
            fn.restype = restype
            fn.argtypes = argtypes
        major: int = dll.ckpt_version_number() // 10000
        if major != ABI_MAJOR:
            raise errors.LibraryNotFoundError(f"{path} is libckpt {version}; this package needs major version "
                                              f"{ABI_MAJOR}")
        self._path = path
        return dll

    def _loaded(self) -> ctypes.CDLL:
        if self._dll is None:
            with self._lock:
                if self._dll is None:
                    self._dll = self._load()
        return self._dll

    @property
    def loaded(self) -> bool:
        """Whether libckpt is loaded (at exit, objects free their handles only if so)."""
        return self._dll is not None

    @property
    def path(self) -> pathlib.Path:
        """Where the loaded libckpt came from."""
        self._loaded()
        assert self._path is not None
        return self._path

    def __getattr__(self, name: str) -> Any:
        """The C function `name`, with the signature _SIGNATURES gives it."""
        return getattr(self._loaded(), name)


lib = _Library()
_thread_errors = threading.local()


class _OwnedError:
    def __init__(self, handle: ctypes.c_void_p) -> None:
        self.handle = handle

    def __del__(self) -> None:
        if lib.loaded:
            lib.ckpt_error_free(self.handle)


def _error_object() -> ctypes.c_void_p:
    """This thread's ckpt_error_t (error objects must not be shared between threads that call at once)."""
    err: Optional[_OwnedError] = getattr(_thread_errors, "err", None)
    if err is None:
        handle = c_void_p()
        if lib.ckpt_error_create(ctypes.byref(handle)) != OK:
            raise MemoryError("ckpt_error_create failed")
        err = _thread_errors.err = _OwnedError(handle)
    return err.handle


# The error class of each CKPT_E_* status (an unknown status gives a plain ckpt.Error).
ERRORS_BY_STATUS: Dict[int, Type[errors.Error]] = {
    cls.status: cls for cls in (errors.InvalidArgumentError, errors.NotFoundError, errors.AlreadyExistsError,
                                errors.MismatchError, errors.CorruptError, errors.VersionError, errors.IoError,
                                errors.NoSpaceError, errors.TimeoutError, errors.PeerFailedError,
                                errors.UnsupportedError, errors.NoMemoryError, errors.InternalError)
    if cls.status is not None}


def error_from_status(status: int, message: str) -> errors.Error:
    """The exception for a failed call's status and message."""
    cls = ERRORS_BY_STATUS.get(status)
    if cls is None:
        return errors.Error(f"status {status}: {message}", status)
    return cls(message)


def error_of(status: int, err: ctypes.c_void_p) -> errors.Error:
    """The ckpt.Error of a failed call: its status and the message the library left in the error object `err`."""
    message: str = (lib.ckpt_error_message(err).decode(errors="replace") or
                    lib.ckpt_status_string(status).decode())
    return error_from_status(status, message)


# A libckpt function's name, or a C function from another library (the XLA FFI handlers) that ends the same way.
Function = Union[str, Callable[..., int]]


def call_status(function: Function, *args: Any, accepted: Collection[Optional[int]] = (OK, IN_PROGRESS)) -> int:
    """Calls `function` with an error object as its last argument, and returns its status if `accepted` (CKPT_OK
    or CKPT_E_IN_PROGRESS by default); raises the matching ckpt.Error otherwise."""
    err = _error_object()
    status: int = (getattr(lib, function) if isinstance(function, str) else function)(*args, err)
    if status not in accepted:
        raise error_of(status, err)
    return status


def call(function: Function, *args: Any) -> None:
    """As call_status(), for a call that must succeed."""
    call_status(function, *args, accepted=(OK,))
