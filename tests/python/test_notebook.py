"""examples/notebooks/quickstart.ipynb executed headless (nbclient, a real ipykernel) against the
real kestreld; every cell must run, and the rich outputs are the HTML tables."""
import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "examples" / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_URL", kestreld.url)
    monkeypatch.setenv("KESTREL_TOKEN", kestreld.token)
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "hello from a kestrel job" in text
    assert "push quickstart/weights" in text and "pull quickstart/weights@production" in text   # tqdm bars
    html = [o["data"]["text/html"] for o in outputs if o.output_type == "execute_result" and "text/html" in o["data"]]
    assert any("<table>" in h and "production" in h for h in html)          # the versions table
    assert any("SUCCEEDED" in h for h in html)                              # the job
