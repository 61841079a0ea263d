"""Types of the public functions' arguments, named once for every module that takes them."""

import os
from typing import Any, Callable, Literal, Mapping, Optional, Union

# A tree of containers and leaves (see ckpt.tree): what save takes and restore returns. Any object may be one.
PyTree = Any
# A checkpoint's or a file's path.
StrPath = Union[str, "os.PathLike[str]"]
# ckpt.save's and CheckpointManager.save's `tier`.
Tier = Literal["storage", "memory", "both"]
# progress(phase, done, total): the progress= callables of save and restore; what they return is ignored.
Progress = Callable[[str, int, int], object]
# restore's `key_map`: the checkpoint's key of each target key named (a dict), or of every target key (a callable;
# None: the key itself).
KeyMap = Union[Mapping[str, str], Callable[[str], Optional[str]]]
# restore's `missing`: what a target key the checkpoint lacks does.
Missing = Literal["error", "warn", "ignore"]
