"""Types of the public functions' arguments, named once for every module that takes them."""

import os
from typing import Any, Callable, Literal, Union

# A tree of containers and leaves (see ckpt.tree): what save takes and restore returns. Any object may be one.
PyTree = Any
# A checkpoint's or a file's path.
StrPath = Union[str, "os.PathLike[str]"]
# ckpt.save's and CheckpointManager.save's `tier`.
Tier = Literal["storage", "memory", "both"]
# progress(phase, done, total): the progress= callables of save and restore; what they return is ignored.
Progress = Callable[[str, int, int], object]
