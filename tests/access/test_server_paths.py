"""Server paths staff may name (access/server_paths.py): only inside MLXLAB_IMPORT_ROOTS,
with links resolved first."""

from __future__ import annotations

import pytest

from access.server_paths import confined_path


@pytest.fixture
def tree(tmp_path, settings):
    """A root with a GGUF file, a folder and links in it, and a GGUF file outside it."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "data").mkdir(parents=True)
    outside.mkdir()
    (root / "model.gguf").write_bytes(b"GGUF")
    (outside / "secret.gguf").write_bytes(b"GGUF")
    (root / "escape.gguf").symlink_to(outside / "secret.gguf")
    (root / "blobs").mkdir()
    (root / "blobs" / "0123abcd").write_bytes(b"GGUF")
    (root / "snapshot.gguf").symlink_to(root / "blobs" / "0123abcd")  # a Hub cache's layout
    settings.MLXLAB = settings.MLXLAB.replace(import_roots=(root,))
    return root, outside


def test_a_file_or_folder_inside_a_root_is_its_real_path(tree):
    root, _ = tree
    assert confined_path(str(root / "model.gguf"), kind="file", suffix=".gguf") == (
        root / "model.gguf"
    )
    assert confined_path(str(root / "data"), kind="folder") == root / "data"
    linked = confined_path(str(root / "snapshot.gguf"), kind="file", suffix=".gguf")
    assert linked == root / "blobs" / "0123abcd"


@pytest.mark.parametrize(
    "name",
    [
        "outside/secret.gguf",  # exists, outside
        "outside/missing.gguf",  # does not exist, outside
        "root/escape.gguf",  # a link inside the root to a file outside it
        "root/../outside/secret.gguf",  # climbs out
        "root/missing.gguf",  # inside, but missing
        "root/data",  # inside, but a folder
    ],
)
def test_everything_else_is_refused(tree, tmp_path, name):
    assert confined_path(str(tmp_path / name), kind="file", suffix=".gguf") is None


def test_relative_paths_other_kinds_and_no_roots_are_refused(tree, settings):
    root, _ = tree
    assert confined_path("root/model.gguf", kind="file", suffix=".gguf") is None
    assert confined_path(str(root / "model.gguf"), kind="folder") is None
    assert confined_path(str(root / "data"), kind="file") is None
    assert confined_path(str(root / "model.gguf"), kind="file", suffix=".bin") is None
    assert confined_path(None, kind="file") is None
    assert confined_path(f"{root}/model.gguf\0", kind="file") is None
    settings.MLXLAB = settings.MLXLAB.replace(import_roots=())
    assert confined_path(str(root / "model.gguf"), kind="file") is None
