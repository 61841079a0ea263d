"""A flax (NNX) + optax training loop that checkpoints with ckpt.CheckpointManager and resumes where it stopped,
into the same mesh or another one. What it saves is everything the next step depends on: the parameters and the
AdamW state (sharded over the mesh as the model's annotations say), the typed PRNG key that drives dropout, and the
data position (the batches consumed, which fixes the next batch and the epoch's shuffle).

    python flax_train.py ROOT --steps 20 --mesh 2x2                  train, saving every 5 steps; resume if ROOT has one
    python flax_train.py ROOT --steps 20 --mesh 2x2 --kill-at 13     the same, killed by SIGKILL after step 13
    python flax_train.py ROOT --steps 20 --mesh 4x1                  resume on a (data=4, model=1) mesh

On a machine without accelerators, XLA_FLAGS=--xla_force_host_platform_device_count=4 gives the process 4 CPU
devices. Several processes work as in train.py (JAX_COORDINATOR_ADDRESS, NUM_PROCESSES, PROCESS_ID). Each step
prints its loss, also as float.hex() so that runs can be compared bit for bit
(bindings/python/tests/test_flax_example.py).
"""
import argparse
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

import ckpt

FEATURES, HIDDEN, EXAMPLES, BATCH = 16, 64, 256, 32  # 8 batches an epoch
LEARNING_RATE, DROPOUT = 1e-2, 0.1


class MLP(nnx.Module):
    """Two layers, tensor-parallel over the mesh's "model" axis: the hidden layer split by columns, the output layer
    by rows. Dropout takes its key at each call, from the key the training state carries."""

    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers
        self.hidden = nnx.Linear(FEATURES, HIDDEN, rngs=rngs,
                                 kernel_init=nnx.with_partitioning(init.lecun_normal(), (None, "model")),
                                 bias_init=nnx.with_partitioning(init.zeros_init(), ("model",)))
        self.dropout = nnx.Dropout(DROPOUT)
        self.out = nnx.Linear(HIDDEN, 1, rngs=rngs,
                              kernel_init=nnx.with_partitioning(init.lecun_normal(), ("model", None)))

    def __call__(self, x, dropout_key):
        return self.out(self.dropout(nnx.relu(self.hidden(x)), rngs=nnx.Rngs(dropout=dropout_key)))


def create():
    """A fresh model and its optimizer; under jax.set_mesh the arrays are created sharded as annotated, and AdamW's
    moments take the sharding of the parameters they belong to."""
    model = MLP(nnx.Rngs(params=0))
    return model, nnx.Optimizer(model, optax.adamw(LEARNING_RATE), wrt=nnx.Param)


def dataset():
    """A synthetic regression set, the same in every process and every run."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((EXAMPLES, FEATURES), dtype=np.float32)
    y = np.sin(x @ rng.standard_normal((FEATURES, 1), dtype=np.float32))
    return x, y


def batch_at(data, position, sharding):
    """The batch after `position` batches: each epoch visits the examples in an order shuffled by its number. Each
    process builds only the shards its devices hold (split over the mesh's "data" axis)."""
    epoch, index = divmod(position, EXAMPLES // BATCH)
    order = np.random.default_rng(epoch).permutation(EXAMPLES)[index * BATCH:(index + 1) * BATCH]
    return tuple(jax.make_array_from_callback((BATCH, *a.shape[1:]), sharding, lambda i, a=a: a[order][i])
                 for a in data)


@nnx.jit
def train_step(model, optimizer, rng, x, y):
    rng, dropout_key = jax.random.split(rng)

    def loss_fn(model):
        return jnp.mean((model(x, dropout_key) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss, rng


def checkpoint_tree(model, optimizer, rng, data_position):
    """What a step saves: plain dicts of arrays (flax's nnx.to_pure_dict) rather than nnx's Variables, so that a
    checkpoint names its tensors by their paths (params/hidden/kernel, optimizer/opt_state/0/mu/hidden/kernel)."""
    return {"params": nnx.to_pure_dict(nnx.state(model)), "optimizer": nnx.to_pure_dict(nnx.state(optimizer)),
            "rng": rng, "data_position": data_position}


def restore(manager, step, mesh):
    """The model, optimizer, key and data position saved as `step`, laid out for `mesh` whatever mesh saved them:
    the target is the abstract state (jax.eval_shape's, through nnx.eval_shape) with this mesh's shardings."""
    abstract_model, abstract_optimizer = nnx.eval_shape(create)
    replicated = NamedSharding(mesh, P())
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=replicated)
    target = checkpoint_tree(abstract_model, abstract_optimizer, key, 0)  # 0: an int is what data_position holds
    for part in ("params", "optimizer"):  # the annotated PartitionSpecs, over this mesh's devices
        target[part] = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(
            mesh, a.sharding.spec)), target[part])
    saved = manager.restore(step, target)
    for module, part in ((abstract_model, "params"), (abstract_optimizer, "optimizer")):
        state = nnx.state(module)
        nnx.replace_by_pure_dict(state, saved[part])
        nnx.update(module, state)
    return abstract_model, abstract_optimizer, saved["rng"], saved["data_position"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="the run's checkpoint directory")
    parser.add_argument("--steps", type=int, default=20, help="train until this step")
    parser.add_argument("--mesh", default="2x2", help="DATAxMODEL, e.g. 2x2 or 4x1 (their product: every device)")
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--kill-at", type=int, help="after this step, wait for the saves in flight, then SIGKILL "
                        "this process: a crash whose last checkpoint is known")
    args = parser.parse_args()

    processes = int(os.environ.get("NUM_PROCESSES", "1"))
    if processes > 1:
        jax.distributed.initialize(num_processes=processes, process_id=int(os.environ["PROCESS_ID"]))
    data_axis, model_axis = (int(n) for n in args.mesh.split("x"))
    # Auto axes: XLA's partitioner places the collectives that the layers' shardings call for.
    mesh = jax.make_mesh((data_axis, model_axis), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    data, batch_sharding = dataset(), NamedSharding(mesh, P("data"))
    say = print if jax.process_index() == 0 else (lambda *a, **k: None)

    manager = ckpt.CheckpointManager(args.root, keep_last=2, save_interval_steps=args.save_every)
    latest = manager.resume_step()  # collective: the same step on every process; None for a fresh start
    with jax.set_mesh(mesh):
        if latest is None:
            model, optimizer = create()
            rng = jax.device_put(jax.random.key(0), NamedSharding(mesh, P()))
            data_position = 0
        else:
            model, optimizer, rng, data_position = restore(manager, latest, mesh)
        say(f"mesh {args.mesh}: " + ("fresh start" if latest is None else
                                     f"resumed from step {latest}, data position {data_position}"))
        for step in range((latest or 0) + 1, args.steps + 1):  # `latest` is done: the next step is latest + 1
            loss, rng = train_step(model, optimizer, rng, *batch_at(data, data_position, batch_sharding))
            data_position += 1
            # Saves every save_every steps and the last one; returns once the arrays are staged (copied off the
            # devices), and the step commits in the background while training goes on.
            manager.save(step, checkpoint_tree(model, optimizer, rng, data_position), force=step == args.steps)
            loss = float(loss)
            say(f"step {step} loss {loss:.6f} {loss.hex()}", flush=True)
            if step == args.kill_at:
                manager.wait()  # so that the last checkpoint is known: a crash may also lose the one in flight
                os.kill(os.getpid(), signal.SIGKILL)
    manager.wait()  # every save committed
    say(f"done: kept steps {manager.all_steps()}")
    manager.close()


if __name__ == "__main__":
    main()
