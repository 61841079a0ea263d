"""Pytrees: flattening a tree into (key, leaf) pairs with stable, readable keys (as ckpt.tree's docstring
describes them), rebuilding it, and describing its structure and leaves in JSON so that a checkpoint can be
restored without a target, its containers rebuilt as the types they were where the program has them (build)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import sys
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Type

import numpy as np
import numpy.typing as npt

from . import _dtypes
from ._types import PyTree
from .tree import Shard

# One label on a leaf's path: a dict key (any hashable), a list index or a field name.
Label = Any
Path = Tuple[Label, ...]
# A leaf's entry in the JSON structure: "key", "kind" ("array", "prng_key", or a COMMON_KINDS value), for a stored
# tensor its "shape" and "dtype" code, and for a PRNG key its "impl" (jax's name for it, "threefry2x32", "rbg").
Description = Dict[str, Any]
# A node of the parsed JSON structure: "t" its kind ("dict", "list", "tuple", "none", "leaf"), "c" its children,
# "k" a dict's labels (its keys sorted, or a record's fields in order), "order" the positions of a dict's children
# in its own key order where that is not sorted, and for a record (any other container, a dict of its fields to
# readers from before records were written) "record" its kind (Record.kind), "module" and "qualname" its type's,
# and for a jax.tree_util node "aux", its auxiliary data (_encode_aux), absent where that could not be written.
Encoded = Dict[str, Any]
# Builds a container from its rebuilt children.
Rebuild = Callable[[List[Any]], Any]

SEPARATOR = "/"
# Common entries under this prefix belong to the package; no leaf key may start with it.
RESERVED_PREFIX = ".ckpt/"
STRUCTURE_KEY = RESERVED_PREFIX + "pytree"
# Changes only when a reader of the previous format would misread the new one. Records and dict orders were added
# to format 1 without changing it: readers from before ignore them (giving dicts, as they always did), and the
# pytrees written before them have none (their records come back as those dicts).
STRUCTURE_FORMAT = 1
ROOT_LEAF_KEY = "value"  # the key of a tree that is a single leaf

# The Python values saved as common entries, by the kind their description records.
COMMON_KINDS: Dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}


class Record(NamedTuple):
    """What a container other than a dict, list or tuple was: its kind ("namedtuple", "dataclass", "node" for a type
    registered with jax.tree_util such as flax's structs and FrozenDict, "dict" for a dict subclass; optax's states
    are namedtuples), its type, and for a node the auxiliary data its flattening gave (static fields, a FrozenDict's
    keys)."""

    kind: str
    cls: type
    aux: Any = None


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


def _jax_node(obj: object) -> Optional[Tuple[List[Label], List[Any], Rebuild, Any]]:
    """(labels, children, rebuild, auxiliary data) if `obj` is a node registered with jax.tree_util, else None."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    flat, treedef = jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda x: x is not obj)
    if jax.tree_util.treedef_is_leaf(treedef):
        return None
    labels = [_label(path[0]) for path, _ in flat]

    def rebuild(children: List[Any]) -> Any:
        return jax.tree_util.tree_unflatten(treedef, children)

    _, aux = treedef.node_data()
    return labels, [child for _, child in flat], rebuild, aux


def _sorted_items(mapping: Dict[Any, Any]) -> List[Tuple[Any, Any]]:
    try:
        return sorted(mapping.items())
    except TypeError:  # keys of mixed types: sort by their text, which is what the checkpoint keys are made of
        return sorted(mapping.items(), key=lambda item: str(item[0]))


def _rebuild_dict(original: Dict[Any, Any], labels: Sequence[Label], children: List[Any]) -> Dict[Any, Any]:
    by_label = dict(zip(labels, children))
    items = [(label, by_label[label]) for label in original]  # in the target's key order, as it was given
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
    """One container of a flattened tree: its kind, its children's labels, how to rebuild it, what it was if more
    than a dict, list or tuple, and a dict's own key order (the positions of its sorted children, where different)."""

    __slots__ = ("kind", "labels", "children", "rebuild", "record", "order")

    def __init__(self, kind: str, labels: Iterable[Label] = (), children: Iterable[Node] = (),
                 rebuild: Optional[Rebuild] = None, record: Optional[Record] = None,
                 order: Optional[List[int]] = None) -> None:
        self.kind = kind  # "dict", "list", "tuple", "none", "leaf" (records count as "dict")
        self.labels = list(labels)
        self.children = list(children)
        self.rebuild = rebuild
        self.record = record
        self.order = order


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
                    functools.partial(_rebuild_dict, obj, labels),
                    None if type(obj) is dict else Record("dict", type(obj)), _own_order(obj, labels))
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        labels = list(obj._fields)
        return Node("dict", labels, [_flatten(v, path + (k,), out) for k, v in zip(labels, obj)],
                    functools.partial(_rebuild_namedtuple, type(obj)), Record("namedtuple", type(obj)))
    if isinstance(obj, (list, tuple)):
        labels = list(range(len(obj)))
        return Node(type(obj).__name__ if type(obj) in (list, tuple) else "list", labels,
                    [_flatten(v, path + (i,), out) for i, v in enumerate(obj)],
                    functools.partial(_rebuild_sequence, type(obj)))
    custom = _jax_node(obj)
    if custom is not None:
        labels, values, rebuild, aux = custom
        return Node("dict", labels, [_flatten(v, path + (k,), out) for k, v in zip(labels, values)], rebuild,
                    Record("node", type(obj), aux))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        labels = [f.name for f in dataclasses.fields(obj)]
        return Node("dict", labels, [_flatten(getattr(obj, k), path + (k,), out) for k in labels],
                    functools.partial(_rebuild_dataclass, obj, labels), Record("dataclass", type(obj)))
    out.append((path, obj))  # an unknown object: a leaf, which the caller refuses naming its key
    return _LEAF


def _own_order(mapping: Dict[Any, Any], sorted_labels: List[Label]) -> Optional[List[int]]:
    """The positions among `sorted_labels` of the keys of `mapping` in its own order; None where that is sorted."""
    position = {label: i for i, label in enumerate(sorted_labels)}
    order = [position[key] for key in mapping]
    return None if order == sorted(order) else order


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
    return _unflatten_node(structure, iter(leaves))


# Recursion through a module function, not a closure naming itself: such a closure is a reference cycle, and the
# leaves it holds (a restore's arrays) would outlive the caller's last reference until the cycle collector ran.
def _unflatten_node(node: Node, leaves: Iterator[Any]) -> Any:
    if node is _NONE:
        return None
    if node is _LEAF:
        return next(leaves)
    assert node.rebuild is not None  # every container has one
    return node.rebuild([_unflatten_node(child, leaves) for child in node.children])


def describe(structure: Node, leaf_descriptions: Iterable[Description]) -> str:
    """The JSON text that records `structure`, with one description (a dict with at least "key" and "kind") per
    leaf in flatten's order. Records (namedtuples, dataclasses, jax.tree_util nodes, dict subclasses) are written as
    dicts of their fields with what build needs to make them their types again."""
    root = _encode_node(structure, iter(leaf_descriptions))
    return json.dumps({"format": STRUCTURE_FORMAT, "root": root}, separators=(",", ":"))


def _encode_node(node: Node, descriptions: Iterator[Description]) -> Encoded:
    if node is _NONE:
        return {"t": "none"}
    if node is _LEAF:
        return dict(next(descriptions), t="leaf")
    encoded: Encoded = {"t": node.kind, "c": [_encode_node(child, descriptions) for child in node.children]}
    if node.kind == "dict":
        encoded["k"] = _encoded_labels(node.labels)
    if node.order is not None:
        encoded["order"] = node.order
    if node.record is not None:
        encoded.update(_encode_record(node.record))
    return encoded


def _encoded_labels(labels: Iterable[Label]) -> List[Label]:
    """Labels as JSON holds them: str and int as they are, any other dict key as its text (as in leaf keys)."""
    return [label if isinstance(label, (str, int)) and not isinstance(label, bool) else str(label)
            for label in labels]


def _encode_record(record: Record) -> Encoded:
    """A record's fields in its node of the JSON structure: what build looks its type up by and rebuilds it with."""
    fields: Encoded = {"record": record.kind, "module": record.cls.__module__, "qualname": record.cls.__qualname__}
    if record.kind == "node":
        try:
            fields["aux"] = _encode_aux(record.aux)
        except TypeError:
            pass  # a static field holding a function, say: build then gives a dict, and says why
    return fields


def _encode_aux(value: Any) -> Any:
    """A node's auxiliary data as JSON: None, bool, int, float and str as they are, tuples and lists tagged so that
    _decode_aux gives back an equal value (jax compares it to match tree structures). TypeError for anything else."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (tuple, list):
        return {type(value).__name__: [_encode_aux(item) for item in value]}
    raise TypeError(f"a {type(value).__qualname__} in a node's auxiliary data cannot be written")


def _decode_aux(encoded: Any) -> Any:
    """The auxiliary data that _encode_aux wrote."""
    if isinstance(encoded, dict):
        (kind, items), = encoded.items()
        decoded = [_decode_aux(item) for item in items]
        return tuple(decoded) if kind == "tuple" else decoded
    return encoded


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
    _collect_leaves(encoded, out)
    return out


def _collect_leaves(node: Encoded, out: List[Description]) -> None:
    if node["t"] == "leaf":
        out.append(node)
    for child in node.get("c", ()):
        _collect_leaves(child, out)


def build(encoded: Encoded, value_of: Callable[[Description], Any]) -> PyTree:
    """A tree with the parsed structure, each leaf value_of(description): dicts (in their saved key order), lists,
    tuples and None, and records as their types where _rebuild_record finds them, else as dicts of their fields,
    with a warning that names the type and says why."""
    kind = encoded["t"]
    if kind == "none":
        return None
    if kind == "leaf":
        return value_of(encoded)
    children = [build(child, value_of) for child in encoded["c"]]
    if kind == "tuple":
        return tuple(children)
    if kind != "dict":
        return children
    items = list(zip(encoded["k"], children))
    if "order" in encoded:
        items = [items[i] for i in encoded["order"]]
    if "record" in encoded:
        try:
            return _rebuild_record(encoded, items)
        except _NotRebuilt as why:
            warnings.warn(f"ckpt.restore: the checkpoint's {encoded['module']}.{encoded['qualname']} comes back as a "
                          f"dict: {why}")
    return dict(items)


class _NotRebuilt(Exception):
    """Why a record cannot be made its type again."""


def _rebuild_record(encoded: Encoded, items: List[Tuple[Label, Any]]) -> Any:
    """The record `encoded` as its type, with the fields `items`; _NotRebuilt if its type cannot be found among the
    modules this program imported, or is no longer of the recorded kind and fields."""
    cls = _imported_type(encoded["module"], encoded["qualname"])
    labels = [label for label, _ in items]
    children = [child for _, child in items]
    kind = encoded["record"]
    if kind == "namedtuple":
        fields = getattr(cls, "_fields", None)
        if not issubclass(cls, tuple) or not isinstance(fields, tuple):
            raise _NotRebuilt("it is no longer a namedtuple")
        _check_fields(list(fields), labels)
        return cls(*children)
    if kind == "dataclass":
        if not dataclasses.is_dataclass(cls):
            raise _NotRebuilt("it is no longer a dataclass")
        _check_fields([f.name for f in dataclasses.fields(cls)], labels)
        return _new_dataclass(cls, items)
    if kind == "node":
        return _new_node(cls, encoded, children)
    if kind == "dict":
        if not issubclass(cls, dict):
            raise _NotRebuilt("it is no longer a dict")
        try:
            return cls(items)
        except TypeError as e:  # defaultdict: its default factory was never recorded
            raise _NotRebuilt(f"{cls.__qualname__}(items) raised: {e}") from None
    raise _NotRebuilt(f"its kind '{kind}' is unknown to this ckpt (written by a newer one?)")


def _imported_type(module: str, qualname: str) -> Type[Any]:
    """The type `qualname` of `module`, looked up only among the modules already imported: importing a module that a
    checkpoint names would run its code."""
    found: Any = sys.modules.get(module)
    if found is None:
        raise _NotRebuilt(f"module {module} is not imported (a restore never imports what a checkpoint names)")
    if "<locals>" in qualname:
        raise _NotRebuilt("it was defined inside a function, where a restore cannot find it")
    for part in qualname.split("."):
        if part.startswith("__") and part.endswith("__"):  # a record names a class, not a module's machinery
            raise _NotRebuilt(f"'{qualname}' names no class")
        found = getattr(found, part, None)
        if found is None:
            raise _NotRebuilt(f"module {module} has no {qualname}")
    if not isinstance(found, type):
        raise _NotRebuilt(f"{module}.{qualname} is not a type")
    return found


def _check_fields(fields: List[str], recorded: List[Label]) -> None:
    if fields != recorded:
        raise _NotRebuilt(f"its fields are now {fields}, the checkpoint's {recorded}")


def _new_dataclass(cls: Any, items: List[Tuple[Label, Any]]) -> Any:
    """An instance of the dataclass `cls` with the fields `items`, made as copy and pickle make one: __init__ and
    __post_init__ would treat the saved state as arguments to derive it from again."""
    rebuilt = cls.__new__(cls)
    for name, child in items:
        object.__setattr__(rebuilt, name, child)  # also for frozen dataclasses
    return rebuilt


def _new_node(cls: type, encoded: Encoded, children: List[Any]) -> Any:
    """The jax.tree_util node `cls` made by its own unflatten function from the recorded auxiliary data and
    `children`, which must flatten back to the recorded labels."""
    jax = sys.modules.get("jax")
    if jax is None:
        raise _NotRebuilt("jax is not imported")
    if "aux" not in encoded:
        raise _NotRebuilt("its static data (its flattening's auxiliary data) could not be written: a checkpoint "
                          "records None, bool, int, float, str, and tuples and lists of them")
    leaf = jax.tree_util.tree_structure(0)
    try:
        treedef = jax.tree_util.PyTreeDef.from_node_data_and_children(
            jax.tree_util.default_registry, (cls, _decode_aux(encoded["aux"])), [leaf] * len(children))
    except RuntimeError:
        raise _NotRebuilt("it is not registered with jax.tree_util") from None
    try:
        rebuilt = jax.tree_util.tree_unflatten(treedef, children)
    except Exception as e:  # the type's own unflatten function refuses what the checkpoint recorded
        raise _NotRebuilt(f"its unflatten function raised {e!r}") from None
    again = _jax_node(rebuilt)
    labels = _encoded_labels(again[0]) if again is not None else []
    if labels != encoded["k"]:
        raise _NotRebuilt(f"rebuilt, it has the fields {labels}, the checkpoint's {encoded['k']}")
    return rebuilt
