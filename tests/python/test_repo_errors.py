"""One failure, one error, whichever door: the same failure of the repository raises the same
KestrelError class through a file:// store and through kestreld (a newcomer's review found a full
disk, a damaged stored manifest and a file:// repository's missing visibility each told apart by
transport: KestrelIOError or InvalidArgumentError there, HTTPError here)."""
import os

import pytest

from conftest import Daemon

kestrel = pytest.importorskip("kestrel")


def doors(kestreld, tmp_path):
    """(client, its store's root) for a file:// store and for kestreld."""
    return [(kestrel.Client(f"file://{tmp_path / 'store'}", ""), tmp_path / "store"),
            (kestrel.Client(kestreld.url, kestreld.token), kestreld.data / "repo")]


def test_a_damaged_stored_manifest_is_an_io_error_through_either_door(kestreld, tmp_path):
    src = tmp_path / "m.bin"
    src.write_bytes(os.urandom(10_000))
    for client, root in doors(kestreld, tmp_path):
        client.push("team/hurt", str(src))
        (root / "models" / "team" / "hurt" / "versions" / "1.json").write_bytes(b"{ damaged")
        with pytest.raises(kestrel.KestrelIOError):
            client.pull("team/hurt@1", str(tmp_path / "out"))
        assert not (tmp_path / "out").exists()


def test_a_full_repository_disk_is_an_io_error_through_either_door(small_fs, tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(40 << 20))   # more than the 24 MiB file system holds
    d = Daemon(small_fs / "k", "--gpus", "0")
    try:
        for client in (kestrel.Client(f"file://{small_fs / 'store'}", ""), kestrel.Client(d.url, d.token)):
            with pytest.raises(kestrel.KestrelIOError) as info:   # kestreld: its 507
                client.push("team/big", str(big))
            assert "No space left" in str(info.value) or "keeps its last" in str(info.value), info.value
    finally:
        d.stop()


def test_visibility_is_unsupported_by_a_file_store(kestreld, tmp_path):
    src = tmp_path / "m.bin"
    src.write_bytes(b"x" * 100)
    (store, _), (served, _) = doors(kestreld, tmp_path)
    for client in (store, served):
        client.push("team/seen", str(src))
    with pytest.raises(kestrel.UnsupportedError):
        store.set_visibility("team/seen", "private")
    served.set_visibility("team/seen", "private")
