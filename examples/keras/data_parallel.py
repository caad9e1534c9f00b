"""Data-parallel Keras 3 on the JAX backend across the ranks of a gang: each rank trains on its part
of every global batch, the gradients are averaged over all of them (gloo on CPU, NCCL on GPUs), and
the run ends with the weights one process would reach on the same global batches. Preempted, it
checkpoints once (rank 0 writes) and every rank resumes from the same step.

    kestrel submit --replicas 2 --gpus 1 --env KERAS_BACKEND=jax -- \\
        python examples/keras/data_parallel.py --epochs 3 --out /tmp/weights.npy
"""
import argparse
import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import kestrel.keras  # noqa: E402


class Progress(keras.callbacks.Callback):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        steps = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        print(f"progress: epoch {self.epoch} optimizer step {steps}", flush=True)
        if self.delay:
            time.sleep(self.delay)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=64, help="the global batch (all ranks together)")
    ap.add_argument("--step-delay", type=float, default=0.0, help="seconds to wait after each batch")
    ap.add_argument("--out", help="rank 0 also writes the final weights here (.npy)")
    args = ap.parse_args()
    kestrel.keras.distribute()            # before the model: its variables are laid out over every rank
    rank, world = int(os.environ.get("KESTREL_RANK", 0)), int(os.environ.get("KESTREL_WORLD_SIZE", 1))
    print(f"rank {rank} of {world}: devices {keras.distribution.list_devices()}", flush=True)
    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.samples, 16)).astype("float32")
    y = (x @ rng.normal(size=(16, 1)) + 0.1 * rng.normal(size=(args.samples, 1))).astype("float32")
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    result = kestrel.keras.fit(model, x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=0,
                               callbacks=[Progress(args.step_delay)])
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    print(f"{result}: optimizer steps {steps}", flush=True)
    if result == "done" and rank == 0:
        weights = np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])
        print("weights " + json.dumps([float(w) for w in weights]), flush=True)   # the final weights, for checks
        if args.out:
            np.save(args.out, weights)


if __name__ == "__main__":
    main()
