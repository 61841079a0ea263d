"""Pytrees: flattening a tree into (key, leaf) pairs with stable, readable keys (as ckpt.tree's docstring
describes them), rebuilding it, and describing its structure and leaves in JSON so that a checkpoint can be
restored without a target."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from . import _dtypes
from ._types import PyTree
from .tree import Shard

# One label on a leaf's path: a dict key (any hashable), a list index or a field name.
Label = Any
Path = Tuple[Label, ...]
# A leaf's entry in the JSON structure: "key", "kind" ("array", "prng_key", or a COMMON_KINDS value), for a stored
# tensor its "shape" and "dtype" code, and for a PRNG key its "impl".
Description = Dict[str, Any]
# A node of the parsed JSON structure: "t" its kind, "c" its children, "k" a dict's labels.
Encoded = Dict[str, Any]
# Builds a container from its rebuilt children.
Rebuild = Callable[[List[Any]], Any]

SEPARATOR = "/"
# Common entries under this prefix belong to the package; no leaf key may start with it.
RESERVED_PREFIX = ".ckpt/"
STRUCTURE_KEY = RESERVED_PREFIX + "pytree"
STRUCTURE_FORMAT = 1
ROOT_LEAF_KEY = "value"  # the key of a tree that is a single leaf

# The Python values saved as common entries, by the kind their description records.
COMMON_KINDS: Dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}


def is_jax_leaf(obj: object) -> bool:
    """Whether `obj` is a jax.Array or a jax.ShapeDtypeStruct (without importing jax where nothing did)."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(obj, (jax.Array, jax.ShapeDtypeStruct))


def is_leaf(obj: object) -> bool:
    return isinstance(obj, (Shard, np.ndarray, np.generic, str, bytes, bool, int, float)) or is_jax_leaf(obj)


def array_description(key: str, kind: str, shape: Iterable[int], dtype: npt.DTypeLike, **extra: Any) -> Description:
    """A leaf's description in the saved pytree for a stored tensor of `shape` and `dtype` (for a PRNG key, its key
    data's): with them, a restore without a target needs nothing but the pytree. TypeError for a dtype ckpt cannot
    store."""
    return dict(key=key, kind=kind, shape=[int(n) for n in shape], dtype=_dtypes.code_of(dtype), **extra)


def _label(entry: object) -> Label:
    """The label of one step of a jax.tree_util key path: a dict key, an index or an attribute name."""
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return getattr(entry, attribute)
    return str(entry)


def _jax_node(obj: object) -> Optional[Tuple[List[Label], List[Any], Rebuild]]:
    """(labels, children, rebuild) if `obj` is a node registered with jax.tree_util, else None."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    flat, treedef = jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda x: x is not obj)
    if jax.tree_util.treedef_is_leaf(treedef):
        return None
    labels = [_label(path[0]) for path, _ in flat]

    def rebuild(children: List[Any]) -> Any:
        return jax.tree_util.tree_unflatten(treedef, children)

    return labels, [child for _, child in flat], rebuild


def _sorted_items(mapping: Dict[Any, Any]) -> List[Tuple[Any, Any]]:
    try:
        return sorted(mapping.items())
    except TypeError:  # keys of mixed types: sort by their text, which is what the checkpoint keys are made of
        return sorted(mapping.items(), key=lambda item: str(item[0]))


def _rebuild_dict(original: Dict[Any, Any], labels: Sequence[Label], children: List[Any]) -> Dict[Any, Any]:
    items = list(zip(labels, children))
    if type(original) is dict:
        return dict(items)
    try:
        rebuilt: Dict[Any, Any] = type(original)(items)
        return rebuilt
    except TypeError:
        return dict(items)


def _rebuild_dataclass(original: object, labels: Sequence[str], children: List[Any]) -> object:
    rebuilt = copy.copy(original)
    for name, child in zip(labels, children):
        object.__setattr__(rebuilt, name, child)
    return rebuilt


def _rebuild_namedtuple(cls: Callable[..., Any], children: List[Any]) -> Any:
    return cls(*children)


def _rebuild_sequence(cls: Callable[[List[Any]], Any], children: List[Any]) -> Any:
    return cls(children)


class Node:
    """One container of a flattened tree: its kind, its children's labels and how to rebuild it."""

    __slots__ = ("kind", "labels", "children", "rebuild", "type_name")

    def __init__(self, kind: str, labels: Iterable[Label] = (), children: Iterable[Node] = (),
                 rebuild: Optional[Rebuild] = None, type_name: Optional[str] = None) -> None:
        self.kind = kind  # "dict", "list", "tuple", "none", "leaf" (dataclasses and custom nodes count as "dict")
        self.labels = list(labels)
        self.children = list(children)
        self.rebuild = rebuild
        self.type_name = type_name


_LEAF = Node("leaf")
_NONE = Node("none")


def _flatten(obj: object, path: Path, out: List[Tuple[Path, Any]]) -> Node:
    if obj is None:
        return _NONE
    if is_leaf(obj):
        out.append((path, obj))
        return _LEAF
    if isinstance(obj, dict):
        items = _sorted_items(obj)
        labels = [k for k, _ in items]
        return Node("dict", labels, [_flatten(v, path + (k,), out) for k, v in items],
                    functools.partial(_rebuild_dict, obj, labels))
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        labels = list(obj._fields)
        return Node("dict", labels, [_flatten(v, path + (k,), out) for k, v in zip(labels, obj)],
                    functools.partial(_rebuild_namedtuple, type(obj)), _type_name(obj))
    if isinstance(obj, (list, tuple)):
        labels = list(range(len(obj)))
        return Node(type(obj).__name__ if type(obj) in (list, tuple) else "list", labels,
                    [_flatten(v, path + (i,), out) for i, v in enumerate(obj)],
                    functools.partial(_rebuild_sequence, type(obj)))
    custom = _jax_node(obj)
    if custom is not None:
        labels, values, rebuild = custom
        return Node("dict", labels, [_flatten(v, path + (k,), out) for k, v in zip(labels, values)], rebuild,
                    _type_name(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        labels = [f.name for f in dataclasses.fields(obj)]
        return Node("dict", labels, [_flatten(getattr(obj, k), path + (k,), out) for k in labels],
                    functools.partial(_rebuild_dataclass, obj, labels), _type_name(obj))
    out.append((path, obj))  # an unknown object: a leaf, which the caller refuses naming its key
    return _LEAF


def _type_name(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def key_of(path: Path) -> str:
    return SEPARATOR.join(str(label) for label in path) if path else ROOT_LEAF_KEY


def flatten(tree: PyTree) -> Tuple[List[Tuple[str, Any]], Node]:
    """([(key, leaf), ...], structure): the leaves in a deterministic order with their keys. ValueError if two
    leaves get the same key (for example {"a/b": x, "a": {"b": y}}) or a key uses the reserved prefix."""
    found: List[Tuple[Path, Any]] = []
    root = _flatten(tree, (), found)
    leaves = []
    seen: Dict[str, Path] = {}
    for path, leaf in found:
        key = key_of(path)
        if key.startswith(RESERVED_PREFIX):
            raise ValueError(f"'{key}': keys starting with '{RESERVED_PREFIX}' are reserved for ckpt")
        if key in seen:
            raise ValueError(f"two leaves have the key '{key}' (paths {seen[key]!r} and {path!r}): rename one")
        seen[key] = path
        leaves.append((key, leaf))
    return leaves, root


def unflatten(structure: Node, leaves: Iterable[Any]) -> PyTree:
    """Rebuilds a tree of `structure` (from flatten) with `leaves` in flatten's order."""
    it = iter(leaves)

    def build(node: Node) -> Any:
        if node is _NONE:
            return None
        if node is _LEAF:
            return next(it)
        assert node.rebuild is not None  # every container has one
        return node.rebuild([build(child) for child in node.children])

    return build(structure)


def describe(structure: Node, leaf_descriptions: Iterable[Description]) -> str:
    """The JSON text that records `structure`, with one description (a dict with at least "key" and "kind") per
    leaf in flatten's order. Dataclasses, namedtuples and custom nodes are recorded as dicts of their fields."""
    it = iter(leaf_descriptions)

    def encode(node: Node) -> Encoded:
        if node is _NONE:
            return {"t": "none"}
        if node is _LEAF:
            return dict(next(it), t="leaf")
        labels = [label if isinstance(label, (str, int)) and not isinstance(label, bool) else str(label)
                  for label in node.labels]
        encoded: Encoded = {"t": node.kind, "c": [encode(child) for child in node.children]}
        if node.kind == "dict":
            encoded["k"] = labels
        if node.type_name:
            encoded["type"] = node.type_name
        return encoded

    return json.dumps({"format": STRUCTURE_FORMAT, "root": encode(structure)}, separators=(",", ":"))


def parse(text: str) -> Encoded:
    """The root node of a structure written by describe(); ValueError if it is not one."""
    try:
        document = json.loads(text)
    except ValueError as e:
        raise ValueError(f"the checkpoint's pytree structure is not valid JSON: {e}") from None
    if not isinstance(document, dict) or document.get("format") != STRUCTURE_FORMAT or "root" not in document:
        raise ValueError("the checkpoint's pytree structure has an unknown format (written by a newer ckpt?)")
    root: Encoded = document["root"]
    return root


def leaves_of(encoded: Encoded) -> List[Description]:
    """The leaf descriptions of a parsed structure, in order."""
    out: List[Description] = []

    def walk(node: Encoded) -> None:
        if node["t"] == "leaf":
            out.append(node)
        for child in node.get("c", ()):
            walk(child)

    walk(encoded)
    return out


def build(encoded: Encoded, value_of: Callable[[Description], Any]) -> PyTree:
    """A tree of plain dicts, lists and tuples with the parsed structure; each leaf is value_of(description)."""
    kind = encoded["t"]
    if kind == "none":
        return None
    if kind == "leaf":
        return value_of(encoded)
    children = [build(child, value_of) for child in encoded["c"]]
    if kind == "dict":
        return dict(zip(encoded["k"], children))
    if kind == "tuple":
        return tuple(children)
    return children
