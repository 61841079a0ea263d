"""ckpt: distributed checkpointing for JAX and numpy, over libckpt's C ABI.

    import ckpt
    request = ckpt.save("/ckpt/run/step-100", {"params": params, "step": 100})   # every rank; returns once staged
    request.wait()                                                               # committed and durable
    request.stats()                                                              # bytes and time of each phase
    state = ckpt.restore("/ckpt/run/step-100", target)                           # any sharding, any number of ranks

Every rank of the job calls save and restore (they are collective); each passes its part of the tree. jax.Arrays
are saved from each process's addressable shards and restored into the target's shardings; numpy arrays are whole
arrays; ckpt.Shard is a rank's box of a global array; bool, int, float, str and bytes leaves are saved once.
"""

from .checkpoint import Request, restore, save
from .context import Context, default_context
from .errors import (AlreadyExistsError, CorruptError, Error, InternalError, InvalidArgumentError, IoError,
                     LibraryNotFoundError, MismatchError, NoMemoryError, NoSpaceError, NotFoundError,
                     PeerFailedError, TimeoutError, UnsupportedError, VersionError)
from .export import export
from .manager import CheckpointManager
from .progress import RequestStats
from .reader import CheckpointInfo, ChunkInfo, Reader, TensorInfo
from .tree import Shard

__version__ = "0.1.0"


def library_version() -> str:
    """The version of the libckpt this package loaded ("major.minor.patch")."""
    from ._native import lib
    version: bytes = lib.ckpt_version_string()
    return version.decode()


__all__ = [
    "AlreadyExistsError", "CheckpointInfo", "CheckpointManager", "ChunkInfo", "Context", "CorruptError", "Error",
    "InternalError", "InvalidArgumentError", "IoError", "LibraryNotFoundError", "MismatchError", "NoMemoryError",
    "NoSpaceError", "NotFoundError", "PeerFailedError", "Reader", "Request", "RequestStats", "Shard", "TensorInfo",
    "TimeoutError", "UnsupportedError", "VersionError", "default_context", "export", "library_version", "restore",
    "save",
]
