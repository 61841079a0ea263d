#!/usr/bin/env python3
"""Checks that the Julia bindings' structs and constants match the ABI table the C build generates from ckpt.h
(tools/abi_table_source.py): no julia is needed, so the check runs wherever the C library builds.

    check_julia_layouts.py ABI_TABLE JULIA_SOURCE_DIR
    check_julia_layouts.py --self-test ABI_TABLE JULIA_SOURCE_DIR

Julia lays an isbits struct out as C does, so each `struct ckpt_*` of the sources is laid out here by the C rules
from its field types (integers, Ptr, NTuple) and compared with the table: the same structs, the same fields in the
same order, each at the same offset with the same size, and the same size and alignment overall. Every
`const CKPT_* = ...` must equal the table's value, and every constant of the table must be defined. Exit 1 lists
every problem; exit 0 prints a summary.

--self-test alters a copy of the table (a field moved, a constant renumbered, a field and a constant added) and
passes only if each alteration is detected, then checks the real table.
"""

import os
import re
import sys
import tempfile

# Julia type -> (size, alignment) on the LP64 platforms ckpt builds for.
SCALARS = {
    "Int8": (1, 1), "UInt8": (1, 1), "Cchar": (1, 1), "Int16": (2, 2), "UInt16": (2, 2), "Int32": (4, 4),
    "UInt32": (4, 4), "Cint": (4, 4), "Cuint": (4, 4), "Int64": (8, 8), "UInt64": (8, 8), "Csize_t": (8, 8),
    "Float32": (4, 4), "Float64": (8, 8),
}
POINTER = (8, 8)


def read_table(path):
    """({struct: (size, align, [(field, offset, size)])}, {constant: value})."""
    structs, constants = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            kind, *cells = line.rstrip("\n").split("\t")
            if kind == "struct":
                structs[cells[0]] = (int(cells[1]), int(cells[2]), [])
            elif kind == "field":
                structs[cells[0]][2].append((cells[1], int(cells[2]), int(cells[3])))
            elif kind == "constant":
                constants[cells[0]] = int(cells[1])
    return structs, constants


def julia_sources(source_dir):
    texts = []
    for root, _, files in os.walk(source_dir):
        for filename in sorted(f for f in files if f.endswith(".jl")):
            with open(os.path.join(root, filename), encoding="utf-8") as f:
                texts.append(re.sub(r"#[^\n]*", "", f.read()))
    return "\n".join(texts)


def julia_constants(text):
    """The value of every `const CKPT_X = ...`: an integer, a conversion such as Int32(2), or an expression of the
    constants before it."""
    constants = {}
    for name, value in re.findall(r"^const (CKPT_\w+) = (.+)$", text, flags=re.M):
        value = re.sub(r"^(?:U?Int(?:8|16|32|64)|Cu?int)\((.*)\)$", r"\1", value.strip())
        if not re.fullmatch(r"[\w\s+\-*()]+", value):
            raise ValueError(f"const {name} = {value}: not an integer expression this check understands")
        constants[name] = int(eval(value, {"__builtins__": {}}, dict(constants)))  # only names, digits, + - * ( )
    return constants


def size_and_alignment(julia_type, constants):
    if julia_type in SCALARS:
        return SCALARS[julia_type]
    if re.fullmatch(r"Ptr\{.*\}|Cstring", julia_type):
        return POINTER
    array = re.fullmatch(r"NTuple\{(\w+),\s*(\w+)\}", julia_type)
    if array:
        count = int(array.group(1)) if array.group(1).isdigit() else constants[array.group(1)]
        size, alignment = size_and_alignment(array.group(2), constants)
        return count * size, alignment
    raise ValueError(f"field type {julia_type}: not a type this check can lay out")


def round_up(n, alignment):
    return (n + alignment - 1) // alignment * alignment


def julia_structs(text, constants):
    """{struct: (size, align, [(field, offset, size)])}, laid out by the C rules."""
    structs = {}
    for name, body in re.findall(r"^struct (ckpt_\w+)\n(.*?)^end", text, flags=re.M | re.S):
        end, alignment, fields = 0, 1, []
        for field, julia_type in re.findall(r"^\s*(\w+)::(\S+)\s*$", body, flags=re.M):
            size, field_alignment = size_and_alignment(julia_type, constants)
            offset = round_up(end, field_alignment)
            fields.append((field, offset, size))
            end, alignment = offset + size, max(alignment, field_alignment)
        structs[name] = (round_up(end, alignment), alignment, fields)
    return structs


def compare(table, julia):
    (table_structs, table_constants), (julia_structs_, julia_constants_) = table, julia
    problems = []
    for name in sorted(set(table_structs) | set(julia_structs_)):
        if name not in julia_structs_ or name not in table_structs:
            where = "missing from the Julia sources" if name in table_structs else "not in the ABI table"
            problems.append(f"struct {name}: {where}")
            continue
        (c_size, c_align, c_fields), (j_size, j_align, j_fields) = table_structs[name], julia_structs_[name]
        if (c_size, c_align) != (j_size, j_align):
            problems.append(f"struct {name}: size {j_size}, alignment {j_align} in Julia; {c_size}, {c_align} in C")
        if c_fields != j_fields:
            problems.append(f"struct {name}: fields (name, offset, size) in Julia {j_fields}, in C {c_fields}")
    for name in sorted(set(table_constants) | set(julia_constants_)):
        if table_constants.get(name) != julia_constants_.get(name):
            problems.append(f"{name}: {julia_constants_.get(name, 'missing')} in Julia, "
                            f"{table_constants.get(name, 'missing')} in the ABI table")
    return problems


def check(table_path, source_dir):
    """Returns (problems, summary)."""
    text = julia_sources(source_dir)
    constants = julia_constants(text)
    table = read_table(table_path)
    if not table[0] or not table[1]:
        return [f"{table_path}: no struct or no constant"], ""
    problems = compare(table, (julia_structs(text, constants), constants))
    return problems, (f"julia layouts OK: {len(table[0])} structs and {len(table[1])} constants of {source_dir} "
                      f"match {table_path}")


def self_test(table_path, source_dir):
    """Each alteration of the table must be caught; the real table must pass."""
    with open(table_path, encoding="utf-8") as f:
        original = f.read()
    alterations = {
        "a field moved": lambda t: re.sub(r"^(field\tckpt_load_options\tunexpected_keys\t)8\t", r"\g<1>12\t", t,
                                          count=1, flags=re.M),
        "a constant renumbered": lambda t: re.sub(r"^(constant\tCKPT_E_IO\t)7$", r"\g<1>17", t, count=1, flags=re.M),
        "a field added": lambda t: t + "field\tckpt_manager_options\tkeep_best\t16\t4\n",
        "a constant added": lambda t: t + "constant\tCKPT_E_UNWRAPPED\t99\n",
    }
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        for label, alter in alterations.items():
            altered = alter(original)
            if altered == original:
                failures.append(f"self-test: could not apply '{label}' to {table_path}")
                continue
            altered_path = os.path.join(scratch, "ckpt_abi.tsv")
            with open(altered_path, "w", encoding="utf-8") as f:
                f.write(altered)
            if not check(altered_path, source_dir)[0]:
                failures.append(f"self-test: '{label}' was not detected")
    problems, summary = check(table_path, source_dir)
    return failures + problems, f"self-test OK: {len(alterations)} table alterations detected; " + summary


def main(argv):
    arguments = [a for a in argv[1:] if a != "--self-test"]
    if len(arguments) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    table_path, source_dir = arguments
    if not os.path.isfile(table_path) or not os.path.isdir(source_dir):
        print(f"no ABI table at {table_path} or no directory at {source_dir}", file=sys.stderr)
        return 2
    run = self_test if "--self-test" in argv else check
    problems, summary = run(table_path, source_dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"julia layouts: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
