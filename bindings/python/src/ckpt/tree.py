"""Pytrees: flattening a tree into (key, leaf) pairs with stable, readable keys, rebuilding it, and describing its
structure in JSON so that a checkpoint can be restored without a target.

Containers are dicts (keys sorted, as JAX sorts them), lists, tuples, namedtuples, dataclasses, and, where JAX is
imported, every node type registered with jax.tree_util (flax structs, optax states). A leaf's key joins the labels
on its path with "/": dict keys, list indices, field names ("params/layer_0/kernel", "opt_state/0/mu"). Everything
else is a leaf; None is an empty subtree, as in JAX.
"""

import copy
import dataclasses
import json
import sys

import numpy as np

SEPARATOR = "/"
# Common entries under this prefix belong to the package; no leaf key may start with it.
RESERVED_PREFIX = ".ckpt/"
STRUCTURE_KEY = RESERVED_PREFIX + "pytree"
STRUCTURE_FORMAT = 1
ROOT_LEAF_KEY = "value"  # the key of a tree that is a single leaf


class Shard:
    """One rank's box of a global array: `data` holds the elements from `offset` on, within `global_shape`.

    Ranks that hold the same box are replicas: ckpt writes it once. As a restore target, `data` gives the box's
    shape and dtype, and a Shard with the loaded elements is returned."""

    __slots__ = ("data", "global_shape", "offset", "replica")

    def __init__(self, data, global_shape, offset, replica=0):
        self.data = data
        self.global_shape = tuple(int(n) for n in global_shape)
        self.offset = tuple(int(n) for n in offset)
        self.replica = int(replica)
        if len(self.global_shape) != np.ndim(data) or len(self.offset) != np.ndim(data):
            raise ValueError(f"Shard: data has {np.ndim(data)} dimensions, global_shape {len(self.global_shape)} and "
                             f"offset {len(self.offset)}")

    def __repr__(self):
        return (f"Shard(shape={tuple(np.shape(self.data))}, dtype={getattr(self.data, 'dtype', '?')}, "
                f"global_shape={self.global_shape}, offset={self.offset}, replica={self.replica})")


def _is_jax_leaf(obj):
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(obj, (jax.Array, jax.ShapeDtypeStruct))


def is_leaf(obj):
    return isinstance(obj, (Shard, np.ndarray, np.generic, str, bytes, bool, int, float)) or _is_jax_leaf(obj)


def _label(entry):
    """The label of one step of a jax.tree_util key path: a dict key, an index or an attribute name."""
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return getattr(entry, attribute)
    return str(entry)


def _jax_node(obj):
    """(labels, children, rebuild) if `obj` is a node registered with jax.tree_util, else None."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    flat, treedef = jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda x: x is not obj)
    if jax.tree_util.treedef_is_leaf(treedef):
        return None
    labels = [_label(path[0]) for path, _ in flat]
    return labels, [child for _, child in flat], lambda children: jax.tree_util.tree_unflatten(treedef, children)


def _sorted_items(mapping):
    try:
        return sorted(mapping.items())
    except TypeError:  # keys of mixed types: sort by their text, which is what the checkpoint keys are made of
        return sorted(mapping.items(), key=lambda item: str(item[0]))


def _rebuild_dict(original, labels, children):
    items = list(zip(labels, children))
    if type(original) is dict:
        return dict(items)
    try:
        return type(original)(items)
    except TypeError:
        return dict(items)


def _rebuild_dataclass(original, labels, children):
    rebuilt = copy.copy(original)
    for name, child in zip(labels, children):
        object.__setattr__(rebuilt, name, child)
    return rebuilt


class Node:
    """One container of a flattened tree: its kind, its children's labels and how to rebuild it."""

    __slots__ = ("kind", "labels", "children", "rebuild", "type_name")

    def __init__(self, kind, labels=(), children=(), rebuild=None, type_name=None):
        self.kind = kind  # "dict", "list", "tuple", "none", "leaf" (dataclasses and custom nodes count as "dict")
        self.labels = list(labels)
        self.children = list(children)
        self.rebuild = rebuild
        self.type_name = type_name


_LEAF = Node("leaf")
_NONE = Node("none")


def _flatten(obj, path, out):
    if obj is None:
        return _NONE
    if is_leaf(obj):
        out.append((path, obj))
        return _LEAF
    if isinstance(obj, dict):
        items = _sorted_items(obj)
        labels = [k for k, _ in items]
        return Node("dict", labels, [_flatten(v, path + (k,), out) for k, v in items],
                    lambda children, o=obj, l=labels: _rebuild_dict(o, l, children))
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        labels = list(obj._fields)
        return Node("dict", labels, [_flatten(v, path + (k,), out) for k, v in zip(labels, obj)],
                    lambda children, t=type(obj): t(*children), _type_name(obj))
    if isinstance(obj, (list, tuple)):
        labels = list(range(len(obj)))
        return Node(type(obj).__name__ if type(obj) in (list, tuple) else "list", labels,
                    [_flatten(v, path + (i,), out) for i, v in enumerate(obj)],
                    lambda children, t=type(obj): t(children))
    custom = _jax_node(obj)
    if custom is not None:
        labels, values, rebuild = custom
        return Node("dict", labels, [_flatten(v, path + (k,), out) for k, v in zip(labels, values)], rebuild,
                    _type_name(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        labels = [f.name for f in dataclasses.fields(obj)]
        return Node("dict", labels, [_flatten(getattr(obj, k), path + (k,), out) for k in labels],
                    lambda children, o=obj, l=labels: _rebuild_dataclass(o, l, children), _type_name(obj))
    out.append((path, obj))  # an unknown object: a leaf, which the caller refuses naming its key
    return _LEAF


def _type_name(obj):
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def key_of(path):
    return SEPARATOR.join(str(label) for label in path) if path else ROOT_LEAF_KEY


def flatten(tree):
    """([(key, leaf), ...], structure): the leaves in a deterministic order with their keys. ValueError if two
    leaves get the same key (for example {"a/b": x, "a": {"b": y}}) or a key uses the reserved prefix."""
    found = []
    root = _flatten(tree, (), found)
    leaves = []
    seen = {}
    for path, leaf in found:
        key = key_of(path)
        if key.startswith(RESERVED_PREFIX):
            raise ValueError(f"'{key}': keys starting with '{RESERVED_PREFIX}' are reserved for ckpt")
        if key in seen:
            raise ValueError(f"two leaves have the key '{key}' (paths {seen[key]!r} and {path!r}): rename one")
        seen[key] = path
        leaves.append((key, leaf))
    return leaves, root


def unflatten(structure, leaves):
    """Rebuilds a tree of `structure` (from flatten) with `leaves` in flatten's order."""
    it = iter(leaves)

    def build(node):
        if node is _NONE:
            return None
        if node is _LEAF:
            return next(it)
        return node.rebuild([build(child) for child in node.children])

    return build(structure)


def describe(structure, leaf_descriptions):
    """The JSON text that records `structure`, with one description (a dict with at least "key" and "kind") per
    leaf in flatten's order. Dataclasses, namedtuples and custom nodes are recorded as dicts of their fields."""
    it = iter(leaf_descriptions)

    def encode(node):
        if node is _NONE:
            return {"t": "none"}
        if node is _LEAF:
            return dict(next(it), t="leaf")
        labels = [label if isinstance(label, (str, int)) and not isinstance(label, bool) else str(label)
                  for label in node.labels]
        encoded = {"t": node.kind, "c": [encode(child) for child in node.children]}
        if node.kind == "dict":
            encoded["k"] = labels
        if node.type_name:
            encoded["type"] = node.type_name
        return encoded

    return json.dumps({"format": STRUCTURE_FORMAT, "root": encode(structure)}, separators=(",", ":"))


def parse(text):
    """The root node of a structure written by describe(); ValueError if it is not one."""
    try:
        document = json.loads(text)
    except ValueError as e:
        raise ValueError(f"the checkpoint's pytree structure is not valid JSON: {e}") from None
    if not isinstance(document, dict) or document.get("format") != STRUCTURE_FORMAT or "root" not in document:
        raise ValueError("the checkpoint's pytree structure has an unknown format (written by a newer ckpt?)")
    return document["root"]


def leaves_of(encoded):
    """The leaf descriptions of a parsed structure, in order."""
    out = []

    def walk(node):
        if node["t"] == "leaf":
            out.append(node)
        for child in node.get("c", ()):
            walk(child)

    walk(encoded)
    return out


def build(encoded, value_of):
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
