"""Real-GPU paths of kestreld and the CLI, on the stand-in NVML (tests/stubs): discovery, exact
placement by memory and type, the nodes view, and the local selector."""
import os
import pathlib

from conftest import KESTREL_CLI, KESTRELD

STUB = str(pathlib.Path(KESTRELD).parents[1] / "stubs" / "new" / "libnvidia-ml.so.1")

GPUS = """\
gpu uuid=GPU-aaaa1111-0000-0000-0000-000000000000 name="NVIDIA T4" bus=0000:10:00.0 cc=7.5 total=17179869184 free=17179869184 util=3/1
gpu uuid=GPU-bbbb2222-0000-0000-0000-000000000000 name="NVIDIA A100-SXM4-80GB" bus=0000:20:00.0 cc=8.0 total=85899345920 free=80000000000 util=0/0
gpu uuid=GPU-cccc3333-0000-0000-0000-000000000000 name="NVIDIA A100-SXM4-80GB" bus=0000:30:00.0 cc=8.0 total=85899345920 free=85899345920 util=0/0
nvlink a=1 b=2 links=4
"""


def gpu_env(tmp_path):
    desc = tmp_path / "gpus.txt"
    desc.write_text(GPUS)
    env = dict(os.environ, KESTREL_NVML_LIBRARY=STUB, KESTREL_FAKE_GPU_FILE=str(desc))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def visible_devices(d, jid):
    return [l for l in d.cli("logs", jid).stdout.splitlines() if l.startswith("CVD=")][0][4:]


def test_server_places_by_memory_and_type_on_exact_devices(daemon, tmp_path):
    d = daemon("--grace-period", "2", env=gpu_env(tmp_path))
    big = d.submit("--gpus", "1", "--min-gpu-memory", "40G", "--", "sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES")
    assert d.wait(big)["state"] == "SUCCEEDED"
    assert visible_devices(d, big) in ("GPU-bbbb2222-0000-0000-0000-000000000000", "GPU-cccc3333-0000-0000-0000-000000000000")
    t4 = d.submit("--gpus", "1", "--gpu-type", "t4", "--", "sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES")
    assert d.wait(t4)["state"] == "SUCCEEDED"
    assert visible_devices(d, t4) == "GPU-aaaa1111-0000-0000-0000-000000000000"
    pair = d.submit("--gpus", "2", "--gpu-type", "a100", "--", "sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES")
    assert d.wait(pair)["state"] == "SUCCEEDED"
    assert visible_devices(d, pair) == ("GPU-bbbb2222-0000-0000-0000-000000000000,"
                                        "GPU-cccc3333-0000-0000-0000-000000000000")
    never = d.submit("--gpus", "1", "--min-gpu-memory", "100G", "--", "true")
    assert "needs 1 x GPU with >= 102400 MB" in d.explain(never)["reason"]
    d.cli("cancel", never)


def test_nodes_view_shows_inventory_and_allocations(daemon, tmp_path):
    d = daemon("--grace-period", "2", env=gpu_env(tmp_path))
    held = d.submit("--gpus", "1", "--gpu-type", "t4", "--", "sleep", "30")
    d.wait_state(held, "RUNNING")
    out = d.cli("nodes").stdout
    assert "node local (pool default): 3 devices, 1 allocated" in out
    t4_line = [l for l in out.splitlines() if "GPU-aaaa1111" in l][0]
    assert " t4 " in t4_line and t4_line.endswith(f"job {held}")
    assert "a100" in out and "81920 MiB" in out and "util   3%" in out
    d.cli("cancel", held)


def test_cli_devices_selects_with_reasons(tmp_path):
    import subprocess
    env = gpu_env(tmp_path)
    out = subprocess.run([KESTREL_CLI, "devices", "--select", "2", "--min-memory", "40G"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "total memory 16384 MiB < 40960 MiB" in out
    assert ("CUDA_VISIBLE_DEVICES=GPU-bbbb2222-0000-0000-0000-000000000000,"
            "GPU-cccc3333-0000-0000-0000-000000000000 CUDA_DEVICE_ORDER=PCI_BUS_ID") in out
    env["CUDA_VISIBLE_DEVICES"] = "GPU-cccc"
    out = subprocess.run([KESTREL_CLI, "devices"], env=env, capture_output=True, text=True, check=True).stdout
    assert "GPU-cccc3333" in out and "GPU-aaaa1111" not in out
    env["KESTREL_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
    out = subprocess.run([KESTREL_CLI, "devices"], env=env, capture_output=True, text=True, check=True).stdout
    assert "no GPUs: /nonexistent/libnvidia-ml.so.1 not found" in out
