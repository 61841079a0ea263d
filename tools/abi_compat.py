#!/usr/bin/env python3
"""Checks that a ckpt.h keeps the ABI of an older one, comparing their ABI tables (tools/abi_table_source.py).

    abi_compat.py OLD_TABLE NEW_TABLE

Every struct of the old table must still exist, at least as large; every old field must keep its offset and size;
a new field must start at or after the old struct's end (an old program's struct_size covers its padding, which
holds whatever its stack held, so a field placed there would read garbage); every old constant must keep its
value (status codes, dtypes and flags are pinned), except the release numbers that CKPT_VERSION_MINOR, _PATCH
and _NUMBER carry. Exit 1 lists every problem; exit 0 prints a summary.
"""

import sys

# Constants that name the header's release rather than part of the ABI: a newer minor release changes them.
RELEASE_NUMBERS = {"CKPT_VERSION_MINOR", "CKPT_VERSION_PATCH", "CKPT_VERSION_NUMBER"}


def read_table(path):
    """({struct: size}, {(struct, field): (offset, size)}, {constant: value})."""
    sizes, fields, constants = {}, {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            kind, *values = line.rstrip("\n").split("\t")
            if kind == "struct":
                sizes[values[0]] = int(values[1])
            elif kind == "field":
                fields[(values[0], values[1])] = (int(values[2]), int(values[3]))
            elif kind == "constant":
                constants[values[0]] = int(values[1])
            else:
                raise ValueError(f"{path}: unknown line kind '{kind}'")
    return sizes, fields, constants


def problems(old, new):
    old_sizes, old_fields, old_constants = old
    new_sizes, new_fields, new_constants = new
    found = []
    for struct, size in old_sizes.items():
        if struct not in new_sizes:
            found.append(f"struct {struct} is gone")
        elif new_sizes[struct] < size:
            found.append(f"struct {struct} shrank from {size} to {new_sizes[struct]} bytes")
    for (struct, field), layout in old_fields.items():
        if struct in new_sizes and new_fields.get((struct, field)) != layout:
            found.append(f"{struct}.{field} was at offset {layout[0]} with {layout[1]} bytes, now "
                         f"{new_fields.get((struct, field), 'missing')}")
    for (struct, field), (offset, _) in new_fields.items():
        if struct in old_sizes and (struct, field) not in old_fields and offset < old_sizes[struct]:
            found.append(f"new field {struct}.{field} at offset {offset} lies inside the old struct's "
                         f"{old_sizes[struct]} bytes: append it after them")
    for name, value in old_constants.items():
        if name not in RELEASE_NUMBERS and new_constants.get(name) != value:
            found.append(f"{name} was {value}, now {new_constants.get(name, 'missing')}")
    return found


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    old, new = read_table(argv[1]), read_table(argv[2])
    found = problems(old, new)
    for problem in found:
        print(f"{argv[2]}: {problem}", file=sys.stderr)
    if found:
        return 1
    pinned = len(set(old[2]) - RELEASE_NUMBERS)
    print(f"ABI kept: {len(old[0])} structs, {len(old[1])} fields and {pinned} pinned constants of {argv[1]} "
          f"unchanged in {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
