"""The package's restatement of the C ABI matches include/ckpt.h: every struct's size and every field's offset (by
compiling a C program against the header), every constant, and every function's number of arguments."""

import ctypes
import os
import re
import subprocess

import pytest

from ckpt import _native, dtypes, errors

HEADER_DIR = os.environ.get("CKPT_INCLUDE") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                            "..", "include")
C_NAMES = {
    _native.ContextOptions: "ckpt_context_options", _native.ContextStats: "ckpt_context_stats",
    _native.TensorShard: "ckpt_tensor_shard", _native.SaveOptions: "ckpt_save_options",
    _native.LoadOptions: "ckpt_load_options", _native.ManagerOptions: "ckpt_manager_options",
    _native.CheckpointInfo: "ckpt_checkpoint_info", _native.TensorInfo: "ckpt_tensor_info",
    _native.ChunkInfo: "ckpt_chunk_info",
}


def compile_and_run(tmp_path, body):
    source = tmp_path / "abi.c"
    source.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <ckpt.h>\nint main(void) {\n" + body +
                      "return 0;\n}\n")
    program = tmp_path / "abi"
    subprocess.run(["cc", "-std=c99", "-I", HEADER_DIR, "-o", str(program), str(source)], check=True)
    output = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    return dict(line.rsplit(" ", 1) for line in output.splitlines())


def test_every_struct_has_the_headers_size_and_offsets(tmp_path):
    lines = []
    for struct, name in C_NAMES.items():
        lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
        for field, _ in struct._fields_:
            lines.append(f'printf("{name}.{field} %zu\\n", offsetof({name}, {field}));')
    from_c = compile_and_run(tmp_path, "\n".join(lines))
    for struct, name in C_NAMES.items():
        assert int(from_c[name]) == ctypes.sizeof(struct), f"{name}: C {from_c[name]}, ctypes {ctypes.sizeof(struct)}"
        for field, _ in struct._fields_:
            assert int(from_c[f"{name}.{field}"]) == getattr(struct, field).offset, f"{name}.{field}"


def test_every_constant_matches_the_header(tmp_path):
    constants = {f"CKPT_TRANSPORT_{k.upper()}": v for k, v in _native.TRANSPORTS.items()}
    constants.update(CKPT_TRANSPORT_DEFAULT=_native.TRANSPORT_DEFAULT, CKPT_STRICT_FAIL=_native.STRICT_FAIL,
                     CKPT_STRICT_LOG=_native.STRICT_LOG, CKPT_STRICT_IGNORE=_native.STRICT_IGNORE,
                     CKPT_SHARD_FLATTENED=_native.SHARD_FLATTENED, CKPT_MEMORY_HOST=_native.MEMORY_HOST,
                     CKPT_SHARD_ALLOW_SHAPE_MISMATCH=_native.SHARD_ALLOW_SHAPE_MISMATCH,
                     CKPT_MAX_NDIM=_native.MAX_NDIM, CKPT_VERSION_MAJOR=_native.ABI_MAJOR,
                     CKPT_E_IN_PROGRESS=errors.IN_PROGRESS)
    for cls in errors._BY_STATUS.values():
        constants[cls.code] = cls.status
    header = open(os.path.join(HEADER_DIR, "ckpt.h")).read()
    dtype_names = re.findall(r"#define (CKPT_DTYPE_\w+) (\d+)", header)
    assert len(dtype_names) == len(dtypes._CODES), "a dtype of ckpt.h is missing from ckpt.dtypes (or the reverse)"
    for name, _ in dtype_names:
        constants[name] = None  # checked below: every header dtype code has a numpy type
    from_c = compile_and_run(tmp_path, "\n".join(f'printf("{n} %lld\\n", (long long)({n}));' for n in constants))
    for name, value in constants.items():
        if name.startswith("CKPT_DTYPE_"):
            dtypes.dtype_of(int(from_c[name]))
        else:
            assert int(from_c[name]) == value, f"{name}: C {from_c[name]}, Python {value}"


def test_every_function_has_the_headers_argument_count():
    header = open(os.path.join(HEADER_DIR, "ckpt.h")).read()
    prototypes = {name: args for name, args in re.findall(r"CKPT_API [\w\s\*]+?\b(ckpt_\w+)\(([^)]*)\);", header)}
    for name, _, argtypes in _native._SIGNATURES:
        assert name in prototypes, f"{name} is not declared in ckpt.h"
        declared = prototypes[name].strip()
        count = 0 if declared in ("", "void") else declared.count(",") + 1
        assert count == len(argtypes), f"{name}: ckpt.h takes {count} arguments, the package passes {len(argtypes)}"


@pytest.mark.parametrize("code", range(1, 29))
def test_dtype_sizes_agree_with_the_library(code):
    assert _native.lib.ckpt_dtype_size(code) == dtypes.dtype_of(code).itemsize
