"""ckpt.Error and its subclasses, one per CKPT_E_* status code of the C library (include/ckpt.h), each carrying the
library's message (which key, rank, file or offset is wrong). Where a built-in exception means the same thing, the
class derives from it too, so `except ValueError` or `except TimeoutError` also catch it."""

from __future__ import annotations

import builtins
from typing import Optional


class Error(Exception):
    """A failed ckpt call. `status` is the pinned CKPT_E_* number, `message` the library's text."""

    status: Optional[int] = None
    code = "CKPT_E_UNKNOWN"
    #: What the caller should do about it.
    remedy = ""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(Error, ValueError):
    status, code, remedy = 1, "CKPT_E_INVALID_ARGUMENT", "fix the call or the registered tree"


class NotFoundError(Error, LookupError):
    status, code, remedy = 2, "CKPT_E_NOT_FOUND", "check the path or key"


class AlreadyExistsError(Error, FileExistsError):
    status, code, remedy = 3, "CKPT_E_ALREADY_EXISTS", "save to another path; a committed checkpoint is never replaced"


class MismatchError(Error, ValueError):
    status, code, remedy = 4, "CKPT_E_MISMATCH", "make the ranks' trees, or the target and the checkpoint, agree"


class CorruptError(Error):
    status, code, remedy = 5, "CKPT_E_CORRUPT", "the checkpoint is damaged: restore another one"


class VersionError(Error):
    status, code, remedy = 6, "CKPT_E_VERSION", "read it with a newer ckpt"


class IoError(Error, OSError):
    status, code, remedy = 7, "CKPT_E_IO", "the operating system refused an I/O call: check the path and permissions"


class NoSpaceError(Error, OSError):
    status, code, remedy = 8, "CKPT_E_NO_SPACE", "free space on the file system, then save again"


class TimeoutError(Error, builtins.TimeoutError):
    status, code, remedy = 9, "CKPT_E_TIMEOUT", "a peer did not answer: check the ranks named, then retry"


class PeerFailedError(Error):
    status, code, remedy = 10, "CKPT_E_PEER_FAILED", "another rank failed: restart the job"


class UnsupportedError(Error, NotImplementedError):
    status, code, remedy = 11, "CKPT_E_UNSUPPORTED", "not available in this build or on this machine"


class NoMemoryError(Error, MemoryError):
    status, code, remedy = 12, "CKPT_E_NO_MEMORY", "free memory or use a smaller staging arena"


class InternalError(Error):
    status, code, remedy = 14, "CKPT_E_INTERNAL", "a bug in ckpt: please report the message"


class LibraryNotFoundError(ImportError):
    """libckpt could not be found or loaded; the message says where the package looked."""

