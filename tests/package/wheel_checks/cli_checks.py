"""The `ckpt` console script on the numpy checkpoint DIR/numpy that numpy_save.py wrote: `ckpt ls` lists its tensors,
`ckpt verify` passes it and fails a copy with one flipped byte, `ckpt export` writes safetensors holding every
array's exact bytes.   Usage: cli_checks.py DIR"""

import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

from numpy_arrays import SHAPES, expected

SAFETENSORS_DTYPES = {"float32": "F32", "bfloat16": "BF16", "int64": "I64"}


def ckpt_tool(*args, status=0):
    """Runs `ckpt ARGS` (the console script on PATH); returns its output, failing unless it exits `status`."""
    done = subprocess.run(["ckpt", *args], capture_output=True, text=True)
    output = done.stdout + done.stderr
    assert done.returncode == status, f"ckpt {' '.join(args)}: exit {done.returncode}, expected {status}\n{output}"
    return output


def check_ls(checkpoint):
    output = ckpt_tool("ls", checkpoint)
    assert "saved by 2 ranks" in output, output
    for key in SHAPES:
        assert key in output, f"ckpt ls does not list {key}:\n{output}"


def check_verify(checkpoint, scratch):
    assert "OK" in ckpt_tool("verify", checkpoint)
    corrupted = os.path.join(scratch, "corrupted")
    shutil.copytree(checkpoint, corrupted)
    data_file = max((os.path.join(dirpath, name) for dirpath, _, names in os.walk(corrupted) for name in names),
                    key=os.path.getsize)
    with open(data_file, "r+b") as f:
        f.seek(0)
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    ckpt_tool("verify", corrupted, status=1)
    return os.path.relpath(data_file, corrupted)


def read_safetensors(path):
    """{name: (dtype name, shape, bytes)} of a safetensors file, read by its format: an 8-byte little-endian header
    length, a JSON header, the data."""
    with open(path, "rb") as f:
        header_length = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_length))
        data = f.read()
    header.pop("__metadata__", None)
    return {name: (entry["dtype"], tuple(entry["shape"]), data[entry["data_offsets"][0]:entry["data_offsets"][1]])
            for name, entry in header.items()}


def check_export(checkpoint, scratch):
    exported = os.path.join(scratch, "out.safetensors")
    ckpt_tool("export", checkpoint, exported)
    tensors = read_safetensors(exported)
    assert set(tensors) == set(SHAPES), f"exported {sorted(tensors)}, expected {sorted(SHAPES)}"
    for key in SHAPES:
        want = expected(key)
        dtype, shape, data = tensors[key]
        assert (dtype, shape) == (SAFETENSORS_DTYPES[want.dtype.name], want.shape), (key, dtype, shape)
        assert data == np.ascontiguousarray(want).tobytes(), f"{key}: exported bytes differ"
    return os.path.getsize(exported)


def main(directory):
    checkpoint = os.path.join(directory, "numpy")
    scratch = os.path.join(directory, "cli")
    os.makedirs(scratch, exist_ok=True)
    check_ls(checkpoint)
    flipped = check_verify(checkpoint, scratch)
    size = check_export(checkpoint, scratch)
    print(f"ckpt CLI ({shutil.which('ckpt')}): ls lists {len(SHAPES)} tensors, verify passes it and fails a flipped "
          f"byte in {flipped}, export wrote {size} B of safetensors with every array's exact bytes")


if __name__ == "__main__":
    main(sys.argv[1])
