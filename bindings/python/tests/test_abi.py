"""The package's restatement of the C ABI matches include/ckpt.h: every struct's size and every field's offset and
size, and every constant, as the ABI table that the C build generates from the header says (build/abi/ckpt_abi.tsv,
tools/abi_table_source.py); and every function's number of arguments."""

import ctypes
import os
import re

import pytest

from ckpt import _dtypes, _native

REPOSITORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
HEADER_DIR = os.environ.get("CKPT_INCLUDE") or os.path.join(REPOSITORY, "include")
ABI_TABLE = os.environ.get("CKPT_ABI_TABLE") or os.path.join(REPOSITORY, "build", "abi", "ckpt_abi.tsv")
C_NAMES = {
    _native.Collectives: "ckpt_collectives", _native.ContextOptions: "ckpt_context_options", _native.ContextStats: "ckpt_context_stats",
    _native.TensorShard: "ckpt_tensor_shard", _native.SaveOptions: "ckpt_save_options",
    _native.LoadOptions: "ckpt_load_options", _native.ManagerOptions: "ckpt_manager_options",
    _native.CheckpointInfo: "ckpt_checkpoint_info", _native.TensorInfo: "ckpt_tensor_info",
    _native.ChunkInfo: "ckpt_chunk_info", _native.ExportOptions: "ckpt_export_options",
    _native.RequestStats: "ckpt_request_stats",
}


def read_table():
    """({struct: size}, {struct: [(field, offset, size)]}, {constant: value})."""
    sizes, fields, constants = {}, {}, {}
    with open(ABI_TABLE, encoding="utf-8") as f:
        for line in f:
            kind, *cells = line.rstrip("\n").split("\t")
            if kind == "struct":
                sizes[cells[0]], fields[cells[0]] = int(cells[1]), []
            elif kind == "field":
                fields[cells[0]].append((cells[1], int(cells[2]), int(cells[3])))
            elif kind == "constant":
                constants[cells[0]] = int(cells[1])
    return sizes, fields, constants


def test_every_struct_has_the_tables_size_and_fields():
    sizes, fields, _ = read_table()
    assert sorted(sizes) == sorted(C_NAMES.values()), "the package's structs are not those of ckpt.h"
    for struct, name in C_NAMES.items():
        assert ctypes.sizeof(struct) == sizes[name], f"{name}: C {sizes[name]}, ctypes {ctypes.sizeof(struct)}"
        ours = [(field, getattr(struct, field).offset, getattr(struct, field).size) for field, _ in struct._fields_]
        assert ours == fields[name], f"{name}: (field, offset, size) in C {fields[name]}, in ctypes {ours}"


def test_every_constant_has_the_tables_value():
    _, _, table = read_table()
    constants = {f"CKPT_TRANSPORT_{k.upper()}": v for k, v in _native.TRANSPORTS.items()}
    constants.update(CKPT_TRANSPORT_DEFAULT=_native.TRANSPORT_DEFAULT, CKPT_STRICT_FAIL=_native.STRICT_FAIL,
                     CKPT_STRICT_LOG=_native.STRICT_LOG, CKPT_STRICT_IGNORE=_native.STRICT_IGNORE,
                     CKPT_SHARD_FLATTENED=_native.SHARD_FLATTENED, CKPT_MEMORY_HOST=_native.MEMORY_HOST,
                     CKPT_SHARD_ALLOW_SHAPE_MISMATCH=_native.SHARD_ALLOW_SHAPE_MISMATCH,
                     CKPT_SHARD_ALLOW_DTYPE_CAST=_native.SHARD_ALLOW_DTYPE_CAST,
                     CKPT_SHARD_COMPRESS=_native.SHARD_COMPRESS,
                     CKPT_MAX_NDIM=_native.MAX_NDIM, CKPT_VERSION_MAJOR=_native.ABI_MAJOR,
                     CKPT_SAVE_IN_PLACE=_native.SAVE_IN_PLACE,
                     CKPT_SAVE_COPY_ON_WRITE=_native.SAVE_COPY_ON_WRITE,
                     CKPT_SAVE_CHECK_REPLICAS=_native.SAVE_CHECK_REPLICAS,
                     CKPT_SAVE_INCREMENTAL=_native.SAVE_INCREMENTAL, CKPT_SAVE_COMPRESS=_native.SAVE_COMPRESS,
                     CKPT_E_IN_PROGRESS=_native.IN_PROGRESS)
    constants.update({f"CKPT_LOAD_READS_{name.upper()}": value for name, value in _native.LOAD_READS.items()})
    constants.update({f"CKPT_PHASE_{name.upper()}": value for value, name in _native.PHASES.items()})
    constants.update({f"CKPT_TIER_{name.upper()}": value for name, value in _native.TIERS.items()})
    constants.update({f"CKPT_BEST_{name.upper()}": value for name, value in _native.BEST_MODES.items()})
    for cls in _native.ERRORS_BY_STATUS.values():
        constants[cls.code] = cls.status
    for name, value in constants.items():
        assert table.get(name) == value, f"{name}: C {table.get(name)}, Python {value}"
    phases = {name for name in table if name.startswith("CKPT_PHASE_")}
    assert phases <= set(constants), f"phases without a Python name: {phases - set(constants)}"
    tiers = {name for name in table if name.startswith("CKPT_TIER_")}
    assert tiers <= set(constants), f"tiers without a Python name: {tiers - set(constants)}"
    status_codes = {name for name in table if re.fullmatch(r"CKPT_E_\w+", name)}
    assert status_codes <= set(constants), f"status codes without a Python error: {status_codes - set(constants)}"
    dtype_codes = {value for name, value in table.items() if name.startswith("CKPT_DTYPE_")}
    assert len(dtype_codes) == len(_dtypes._CODES), "a dtype of ckpt.h is missing from ckpt._dtypes (or the reverse)"
    for code in dtype_codes:
        _dtypes.dtype_of(code)


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
    assert _native.lib.ckpt_dtype_size(code) == _dtypes.dtype_of(code).itemsize
