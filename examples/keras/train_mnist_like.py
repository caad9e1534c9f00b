"""A small Keras 3 classifier on synthetic MNIST-shaped data.

Runs anywhere (CPU is fine; KERAS_BACKEND=torch in CI). Inside a Kestrel job it
reports each epoch's metrics to kestreld with the job's own token and saves the
final model into KESTREL_CHECKPOINT_DIR.

    kestrel submit --name mnist-like -- python examples/keras/train_mnist_like.py --epochs 3
"""
import argparse
import json
import os
import time
import urllib.request

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402


class KestrelMetrics(keras.callbacks.Callback):
    """Reports epoch metrics to the job's kestreld (POST /api/v1/jobs/{id}/metrics)."""

    def __init__(self):
        super().__init__()
        self.url = os.environ.get("KESTREL_URL")
        self.token = os.environ.get("KESTREL_TOKEN")
        self.job = os.environ.get("KESTREL_JOB_ID")

    def on_epoch_end(self, epoch, logs=None):
        if not (self.url and self.token and self.job):
            return
        now = int(time.time() * 1000)
        points = [{"name": k, "step": epoch + 1, "value": float(v), "wall_time_ms": now}
                  for k, v in (logs or {}).items()]
        req = urllib.request.Request(
            f"{self.url}/api/v1/jobs/{self.job}/metrics",
            data=json.dumps({"metrics": points}).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()


def make_data(n, seed):
    # ten fixed class prototypes plus per-sample noise: learnable, so the loss visibly falls
    protos = np.random.default_rng(0).normal(size=(10, 28, 28, 1)).astype("float32")
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, size=n)
    x = protos[y] + 2.0 * rng.normal(size=(n, 28, 28, 1)).astype("float32")
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()

    keras.utils.set_random_seed(7)
    x, y = make_data(args.samples, seed=1)
    xv, yv = make_data(args.samples // 4, seed=2)
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    print(f"keras {keras.__version__} backend={keras.backend.backend()} "
          f"job={os.environ.get('KESTREL_JOB_ID', '-')} "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}", flush=True)
    hist = model.fit(x, y, validation_data=(xv, yv), epochs=args.epochs, batch_size=args.batch_size,
                     verbose=2, callbacks=[KestrelMetrics()])
    ckpt = os.environ.get("KESTREL_CHECKPOINT_DIR")
    if ckpt:
        path = os.path.join(ckpt, "model.keras")
        model.save(path)
        print(f"saved {path}", flush=True)
    acc = hist.history["val_accuracy"][-1]
    print(f"final val_accuracy={acc:.3f}", flush=True)


if __name__ == "__main__":
    main()
