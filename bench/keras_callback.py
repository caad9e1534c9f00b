"""bench/keras_callback: the cost of kestrel.keras.MetricsCallback per training step.

The same model and data are trained with and without the callback, alternating runs in one
process against a local kestreld (the callback reports to a real job). Prints the median step time
of each and the overhead. Target (issue 4): <= 1 % of step time.
Usage: python bench/keras_callback.py KESTRELD   (run by `make bench-keras-callback`)
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import kestrel  # noqa: E402
import kestrel.keras  # noqa: E402


def start_daemon(path, root):
    data, port = os.path.join(root, "data"), os.path.join(root, "port")
    proc = subprocess.Popen([path, "--port", "0", "--data-dir", data, "--port-file", port], stderr=subprocess.DEVNULL)
    for _ in range(400):
        if os.path.exists(port) and os.path.exists(os.path.join(data, "admin.token")):
            break
        time.sleep(0.025)
    url = "http://127.0.0.1:" + open(port).read().strip()
    return proc, url, open(os.path.join(data, "admin.token")).read().strip()


class StepTimer(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self.t0)


def main():
    root = tempfile.mkdtemp(prefix="kestrel-bench-cb-")
    proc, url, token = start_daemon(sys.argv[1], root)
    try:
        client = kestrel.Client(url, token)
        job = client.submit(["sleep", "600"], name="bench-target")
        keras.utils.set_random_seed(1)
        rng = np.random.default_rng(0)
        x = rng.normal(size=(8192, 256)).astype("float32")
        y = rng.integers(0, 10, size=8192)
        model = keras.Sequential([keras.Input(shape=(256,)), keras.layers.Dense(512, activation="relu"),
                                  keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x[:512], y[:512], batch_size=64, epochs=1, verbose=0)   # warm up
        plain, withcb = [], []
        for rnd in range(6):
            for use in (False, True):
                timer = StepTimer()
                timer.times = []
                cbs = [timer]
                if use:
                    cbs.append(kestrel.keras.MetricsCallback(every=10, batch_size=64, client=client, job_id=job.id))
                model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=cbs)
                (withcb if use else plain).extend(timer.times[5:])
        p, w = float(np.median(plain)), float(np.median(withcb))
        points = len(job.metrics())
        print("bench-keras-callback: same model and data, step time with and without MetricsCallback (every 10 batches)")
        print(f"  without: median {p * 1e3:.3f} ms/step   with: median {w * 1e3:.3f} ms/step   "
              f"overhead {100 * (w - p) / p:+.2f} % (target <= 1 %); {points} points reached the server")
        job.cancel()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
