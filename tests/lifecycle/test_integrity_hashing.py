"""hash_tree (the "integrity" part): the digests sha256sum prints, the files model-signing hashes, and the
refusals that name the file."""

import os
import socket

import pytest

from appliance.lifecycle import hashing
from appliance.lifecycle.errors import LifecycleError
from tests.lifecycle.integrity_support import sha256sum, write_model


def test_every_file_with_the_digest_sha256sum_prints(tmp_path):
    model = write_model(tmp_path / "llama")
    (model / "sub").mkdir()
    (model / "sub" / "merges.txt").write_text("a b\n")
    big = model / "big.bin"
    big.write_bytes(os.urandom(9 * 1024 * 1024 + 17))  # more than two 4 MiB reads, not a multiple

    digests = hashing.hash_tree(model)

    assert [d.path for d in digests] == [
        "big.bin", "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "sub/merges.txt", "tokenizer.json"]
    for digest in digests:
        on_disk = model / digest.path
        assert digest.sha256 == sha256sum(on_disk)
        assert digest.size == on_disk.stat().st_size
        assert digest.mtime_ns == on_disk.stat().st_mtime_ns
        assert digest.inode == on_disk.stat().st_ino


def test_an_empty_file_and_a_known_digest(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "empty").write_bytes(b"")
    (model / "abc").write_bytes(b"abc")
    digests = {d.path: d.sha256 for d in hashing.hash_tree(model)}
    assert digests == {
        "abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        "empty": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    }


def test_a_single_file_is_named_by_itself(tmp_path):
    file = tmp_path / "model.gguf"
    file.write_bytes(b"GGUF" + bytes(100))
    [digest] = hashing.hash_tree(file)
    assert digest.path == "model.gguf"
    assert digest.size == 104


def test_git_files_at_the_top_are_left_out_as_model_signing_does(tmp_path):
    model = write_model(tmp_path / "llama")
    (model / ".git").mkdir()
    (model / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (model / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (model / "docs").mkdir()
    (model / "docs" / ".gitignore").write_text("*.tmp\n")  # only the top level is git's
    paths = [d.path for d in hashing.hash_tree(model)]
    assert ".git/HEAD" not in paths and ".gitattributes" not in paths
    assert "docs/.gitignore" in paths


def test_a_link_inside_the_model_is_refused_as_model_signing_refuses_it(tmp_path):
    model = write_model(tmp_path / "llama")
    (model / "tokenizer_link.json").symlink_to("tokenizer.json")
    with pytest.raises(LifecycleError, match="^source: tokenizer_link.json: a symbolic link; model-signing"):
        hashing.hash_tree(model)


def test_a_link_out_of_the_model_is_refused_naming_it(tmp_path):
    model = write_model(tmp_path / "llama")
    (tmp_path / "secret").write_text("not the model's")
    (model / "weights.bin").symlink_to(tmp_path / "secret")
    with pytest.raises(LifecycleError) as refused:
        hashing.hash_tree(model)
    assert str(refused.value) == "source: weights.bin: a symbolic link that leaves the model's directory"
    assert refused.value.field == "source"


def test_a_link_to_a_directory_is_refused(tmp_path):
    model = write_model(tmp_path / "llama")
    (model / "inner").mkdir()
    (model / "again").symlink_to(model / "inner")
    with pytest.raises(LifecycleError, match="^source: again: a symbolic link; "):
        hashing.hash_tree(model)


def test_a_special_file_is_refused_naming_it(tmp_path):
    model = write_model(tmp_path / "llama")
    os.mkfifo(model / "pipe")
    with pytest.raises(LifecycleError, match="^source: pipe: a special file"):
        hashing.hash_tree(model)
    os.unlink(model / "pipe")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(model / "sock"))
        with pytest.raises(LifecycleError, match="^source: sock: a special file"):
            hashing.hash_tree(model)
    finally:
        server.close()


def test_too_many_files_are_refused(tmp_path, monkeypatch):
    model = tmp_path / "many"
    model.mkdir()
    for n in range(6):
        (model / f"f{n}").write_text(str(n))
    monkeypatch.setattr(hashing, "MAX_FILES", 5)
    with pytest.raises(LifecycleError, match="^source: more than 5 files"):
        hashing.hash_tree(model)


def test_an_unreadable_file_is_named(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    model = write_model(tmp_path / "llama")
    (model / "config.json").chmod(0)
    with pytest.raises(LifecycleError, match=r"^source: config.json: cannot be read \(Permission denied\)"):
        hashing.hash_tree(model)


def test_an_empty_directory_is_refused(tmp_path):
    (tmp_path / "nothing").mkdir()
    with pytest.raises(LifecycleError, match="^source: nothing: no files to register"):
        hashing.hash_tree(tmp_path / "nothing")
