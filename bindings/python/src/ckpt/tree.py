"""The trees that save and restore take: which containers they walk, how leaves get their keys, and ckpt.Shard, a
rank's box of a global array.

Containers are dicts (keys sorted, as JAX sorts them), lists, tuples, namedtuples, dataclasses, and, where JAX is
imported, every node type registered with jax.tree_util (flax structs, optax states). A leaf's key joins the labels
on its path with "/": dict keys, list indices, field names ("params/layer_0/kernel", "opt_state/0/mu"). Everything
else is a leaf; None is an empty subtree, as in JAX.

A save records each container's kind and type (a namedtuple's fields, a registered node's static data, a dict's key
order), so that ckpt.restore without a target gives back the types this program has imported, and dicts of their
fields for the others.
"""

from __future__ import annotations

from typing import Iterable, Tuple

import numpy as np
import numpy.typing as npt


class Shard:
    """One rank's box of a global array: `data` holds the elements from `offset` on, within `global_shape`.

    Ranks that hold the same box are replicas: ckpt writes it once. As a restore target, `data` gives the box's
    shape and dtype, and a Shard with the loaded elements is returned."""

    __slots__ = ("data", "global_shape", "offset", "replica")

    def __init__(self, data: npt.ArrayLike, global_shape: Iterable[int], offset: Iterable[int],
                 replica: int = 0) -> None:
        self.data = data
        self.global_shape: Tuple[int, ...] = tuple(int(n) for n in global_shape)
        self.offset: Tuple[int, ...] = tuple(int(n) for n in offset)
        self.replica = int(replica)
        if len(self.global_shape) != np.ndim(data) or len(self.offset) != np.ndim(data):
            raise ValueError(f"Shard: data has {np.ndim(data)} dimensions, global_shape {len(self.global_shape)} and "
                             f"offset {len(self.offset)}")

    def __repr__(self) -> str:
        return (f"Shard(shape={tuple(np.shape(self.data))}, dtype={getattr(self.data, 'dtype', '?')}, "
                f"global_shape={self.global_shape}, offset={self.offset}, replica={self.replica})")
