#!/usr/bin/env python3
"""Checks that the Julia bindings call every function of ckpt.h with the header's signature.

    check_julia_signatures.py HEADER JULIA_SOURCE_DIR
    check_julia_signatures.py --self-test HEADER JULIA_SOURCE_DIR

The header's declarations are `CKPT_API <return type> ckpt_<name>(<parameters>);`, possibly over several lines.
The Julia sources call them as `@ccall $(ckptsym(:ckpt_<name>))(arg::Type, ...)::ReturnType` (the form
bindings/julia/src/LibCkpt.jl uses; `@ccall lib.ckpt_<name>(...)` is understood too). For every function the check
compares the number of arguments, then each argument's and the return value's kind: pointer, or integer of a given
width and signedness, or void. It fails (exit 1, one line per problem) if a call names a function the header
lacks, disagrees with it, or if a header function is never called. Exit 0 prints a one-line summary.

--self-test alters a copy of the header (drops a parameter, changes a width, adds a function) and passes only if
each alteration is detected, then checks the real header.
"""

import os
import re
import sys
import tempfile

# C type -> kind. Pointers (anything with '*', or a function pointer typedef) are "pointer".
C_KINDS = {
    "void": "void",
    "int8_t": "i8", "uint8_t": "u8", "char": "i8",
    "int16_t": "i16", "uint16_t": "u16",
    "int32_t": "i32", "uint32_t": "u32", "int": "i32", "unsigned": "u32",
    "int64_t": "i64", "uint64_t": "u64", "size_t": "u64",
}

# Julia type -> kind.
JULIA_KINDS = {
    "Cvoid": "void", "Nothing": "void",
    "Int8": "i8", "UInt8": "u8", "Cchar": "i8", "Cuchar": "u8",
    "Int16": "i16", "UInt16": "u16", "Cshort": "i16", "Cushort": "u16",
    "Int32": "i32", "UInt32": "u32", "Cint": "i32", "Cuint": "u32",
    "Int64": "i64", "UInt64": "u64", "Clonglong": "i64", "Culonglong": "u64", "Csize_t": "u64", "Cssize_t": "i64",
}
JULIA_POINTER = re.compile(r"^(Ptr|Ref)(\{.*\})?$|^Cstring$|^Cwstring$")


class Signature:
    """A function's return kind and parameter kinds, with where it was found."""

    def __init__(self, name, returns, params, where):
        self.name, self.returns, self.params, self.where = name, returns, params, where


def blank(match):
    """The matched text with everything but newlines made spaces, so that offsets and line numbers survive."""
    return re.sub(r"[^\n]", " ", match.group(0))


def strip_c_comments_and_directives(text):
    text = re.sub(r"/\*.*?\*/", blank, text, flags=re.S)
    text = re.sub(r"//[^\n]*", blank, text)
    # Preprocessor lines, with their backslash continuations.
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", blank, text, flags=re.M)


def split_top_level(text, separator=","):
    """Splits at separators outside (), {} and []."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def matching_paren(text, open_index):
    """Index of the ')' that closes the '(' at open_index, or -1."""
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def c_kind(declaration, pointer_typedefs):
    """Kind of a C parameter or return type (the parameter name, if any, is ignored)."""
    declaration = re.sub(r"\bconst\b|\bvolatile\b|\bstruct\b", " ", declaration)
    if "*" in declaration or "(" in declaration:
        return "pointer"
    words = declaration.split()
    if not words:
        return "unknown"
    for word in words:
        if word in pointer_typedefs:
            return "pointer"
    # The type is the first word that names one ("unsigned int", "uint32_t name").
    for word in words:
        if word in C_KINDS:
            return C_KINDS[word]
    return "unknown:" + words[0]


def parse_header(path):
    with open(path, encoding="utf-8") as f:
        text = strip_c_comments_and_directives(f.read())
    pointer_typedefs = set(re.findall(r"typedef[^;]*?\(\s*\*\s*(\w+)\s*\)", text))
    functions = {}
    for match in re.finditer(r"\bCKPT_API\b([^;{]*?)\b(ckpt_\w+)\s*\(", text):
        returns, name = match.group(1), match.group(2)
        close = matching_paren(text, match.end() - 1)
        if close < 0:
            raise ValueError(f"{path}: unbalanced parentheses in the declaration of {name}")
        params = split_top_level(text[match.end():close])
        if params == ["void"] or params == [""]:
            params = []
        line = text.count("\n", 0, match.start()) + 1
        functions[name] = Signature(name, c_kind(returns, pointer_typedefs),
                                    [c_kind(p, pointer_typedefs) for p in params], f"{path}:{line}")
    return functions


def julia_kind(type_text):
    type_text = type_text.strip()
    if JULIA_POINTER.match(type_text):
        return "pointer"
    return JULIA_KINDS.get(type_text, "unknown:" + type_text)


CCALL = re.compile(r"@ccall\s+(?:\$\(\s*ckptsym\(\s*:(ckpt_\w+)\s*\)\s*\)|[\w.]*?\.?(ckpt_\w+))\s*\(")


def strip_julia_comments(text):
    """Blanks out comments and string contents (keeping line numbers), so neither can hold a false @ccall."""
    text = re.sub(r"#=.*?=#", blank, text, flags=re.S)
    text = re.sub(r'""".*?"""', blank, text, flags=re.S)
    return re.sub(r"#[^\n]*", blank, text)


def parse_julia_calls(source_dir):
    calls, problems = [], []
    for root, _, files in os.walk(source_dir):
        for filename in sorted(files):
            if not filename.endswith(".jl"):
                continue
            path = os.path.join(root, filename)
            with open(path, encoding="utf-8") as f:
                text = strip_julia_comments(f.read())
            for match in CCALL.finditer(text):
                name = match.group(1) or match.group(2)
                where = f"{path}:{text.count(chr(10), 0, match.start()) + 1}"
                close = matching_paren(text, match.end() - 1)
                returned = re.match(r"\s*::\s*([\w{}.]+(?:\{[^()]*\})?)", text[close + 1:]) if close >= 0 else None
                if close < 0 or returned is None:
                    problems.append(f"{where}: cannot parse the @ccall of {name} (expected name(arg::Type, ...)::Type)")
                    continue
                args = [a for a in split_top_level(text[match.end():close]) if a]
                kinds = []
                for arg in args:
                    if "::" not in arg:
                        problems.append(f"{where}: {name}: argument '{arg}' has no ::Type")
                    kinds.append(julia_kind(arg.rsplit("::", 1)[-1]))
                calls.append(Signature(name, julia_kind(returned.group(1)), kinds, where))
    return calls, problems


def compare(header, calls):
    problems = []
    wrapped = set()
    for call in calls:
        declared = header.get(call.name)
        if declared is None:
            problems.append(f"{call.where}: {call.name} is not declared in the header")
            continue
        wrapped.add(call.name)
        if len(call.params) != len(declared.params):
            problems.append(f"{call.where}: {call.name} passes {len(call.params)} argument(s), "
                            f"the header declares {len(declared.params)} ({declared.where})")
            continue
        for position, (got, want) in enumerate(zip(call.params, declared.params), start=1):
            if got != want:
                problems.append(f"{call.where}: {call.name} argument {position} is {got}, the header has {want}")
        if call.returns != declared.returns:
            problems.append(f"{call.where}: {call.name} returns {call.returns}, the header has {declared.returns}")
    for name in sorted(set(header) - wrapped):
        problems.append(f"{header[name].where}: {name} is not wrapped by any @ccall")
    return problems


def check(header_path, source_dir):
    """Returns (problems, summary)."""
    header = parse_header(header_path)
    if not header:
        return [f"{header_path}: no CKPT_API declarations found"], ""
    calls, problems = parse_julia_calls(source_dir)
    problems += compare(header, calls)
    summary = (f"julia signatures OK: {len(calls)} @ccall(s) in {source_dir} match the "
               f"{len(header)} functions of {header_path}")
    return problems, summary


def self_test(header_path, source_dir):
    """Each alteration of the header must be caught; the real header must pass."""
    with open(header_path, encoding="utf-8") as f:
        original = f.read()
    alterations = {
        "a parameter dropped from ckpt_load":
            lambda t: re.sub(r"(ckpt_load\([^)]*?),\s*ckpt_error_t\*\s*err\)", r"\1)", t, count=1),
        "a width changed in ckpt_request_wait":
            lambda t: t.replace("uint32_t timeout_ms, ckpt_error_t", "uint64_t timeout_ms, ckpt_error_t", 1),
        "a pointer made an integer in ckpt_reader_verify":
            lambda t: t.replace("ckpt_reader_verify(ckpt_reader_t* reader", "ckpt_reader_verify(int64_t reader", 1),
        "a function added":
            lambda t: t.replace("#ifdef __cplusplus\n}", "CKPT_API int32_t ckpt_unwrapped(void);\n#ifdef __cplusplus\n}", 1),
    }
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        for label, alter in alterations.items():
            altered = alter(original)
            if altered == original:
                failures.append(f"self-test: could not apply '{label}' to {header_path}")
                continue
            altered_path = os.path.join(scratch, "ckpt.h")
            with open(altered_path, "w", encoding="utf-8") as f:
                f.write(altered)
            problems, _ = check(altered_path, source_dir)
            if not problems:
                failures.append(f"self-test: '{label}' was not detected")
    problems, summary = check(header_path, source_dir)
    failures += problems
    return failures, f"self-test OK: {len(alterations)} header alterations detected; " + summary


def main(argv):
    arguments = [a for a in argv[1:] if a != "--self-test"]
    if len(arguments) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    header_path, source_dir = arguments
    if not os.path.isfile(header_path) or not os.path.isdir(source_dir):
        print(f"no header at {header_path} or no directory at {source_dir}", file=sys.stderr)
        return 2
    run = self_test if "--self-test" in argv else check
    problems, summary = run(header_path, source_dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"julia signatures: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
