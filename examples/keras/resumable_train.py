"""A Keras job that survives preemption without losing a step (kestrel.keras.fit) and streams its
metrics to kestreld (kestrel.keras.MetricsCallback).

    kestrel submit --gpus 1 --name resumable -- python examples/keras/resumable_train.py --epochs 2
"""
import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import kestrel.keras  # noqa: E402


class Progress(keras.callbacks.Callback):
    def __init__(self, every, delay=0.0):
        super().__init__()
        self.every, self.delay = every, delay

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        steps = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if steps % self.every == 0:
            print(f"progress: epoch {self.epoch} optimizer step {steps}", flush=True)
        if self.delay:
            time.sleep(self.delay)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=6400)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--step-delay", type=float, default=0.0, help="seconds to wait after each batch (a longer demo)")
    args = ap.parse_args()
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.samples, 64)).astype("float32")
    y = (x[:, :8].sum(axis=1) > 0).astype("int32")
    model = keras.Sequential([keras.Input(shape=(64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    restart = os.environ.get("KESTREL_RESTART_COUNT", "0")
    print(f"run {int(restart) + 1}: starting", flush=True)
    result = kestrel.keras.fit(model, x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=0,
                               callbacks=[Progress(20, args.step_delay), kestrel.keras.MetricsCallback(every=20, batch_size=args.batch_size)])
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    print(f"{result}: optimizer steps {steps}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
