"""Image specs and tags (plan time): stable, following exactly the sources of each image."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from accelpipe import REPO
from accelpipe.core import containers
from accelpipe.core.errors import ConfigError
from accelpipe.plan import images


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    for name in ("docker", "requirements", "workflow"):
        shutil.copytree(
            REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "wheelhouse")
        )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tmp_path / name)
    return tmp_path


def test_tag_is_stable_and_follows_sources(repo_copy: Path) -> None:
    spec = images.spec_for("cpu", repo=repo_copy)
    tag = images.image_tag(spec, repo_copy)
    assert tag == images.image_tag(spec, repo_copy) and len(tag) == 12
    (repo_copy / "workflow/accelpipe/__pycache__").mkdir(exist_ok=True)
    (repo_copy / "workflow/accelpipe/__pycache__/x.pyc").write_bytes(b"noise")
    assert images.image_tag(spec, repo_copy) == tag  # bytecode is not a source

    model = repo_copy / "workflow/accelpipe/models/dynunet2d.py"
    model.write_text(model.read_text() + "\n# a comment is not what runs\n")
    assert images.image_tag(spec, repo_copy) == tag
    model.write_text(model.read_text() + "\nEDITED = 1\n")
    edited = images.image_tag(spec, repo_copy)
    assert edited != tag
    dockerfile = repo_copy / spec.dockerfile
    dockerfile.write_text(dockerfile.read_text() + "\n# edited\n")
    assert images.image_tag(spec, repo_copy) not in (tag, edited)


def test_a_tag_hashes_only_what_goes_into_its_image(repo_copy: Path) -> None:
    """A torch-only module or pin rebuilds the PyTorch images and no TensorFlow one."""
    torch_spec = images.spec_for("cpu", "pytorch", repo=repo_copy)
    tf_spec = images.spec_for("cpu", "tensorflow", repo=repo_copy)
    before = images.image_tag(torch_spec, repo_copy), images.image_tag(tf_spec, repo_copy)
    for name, edit in (
        ("workflow/accelpipe/models/dynunet2d.py", "EDITED = 1"),
        ("requirements/torch.txt", "# edited"),
    ):
        path = repo_copy / name
        path.write_text(path.read_text() + f"\n{edit}\n")
    assert images.image_tag(torch_spec, repo_copy) != before[0]
    assert images.image_tag(tf_spec, repo_copy) == before[1]
    # code every image runs (the trace summarizer's stage) and a shared pin change both
    for name, edit in (
        ("workflow/accelpipe/stages/trace.py", "EDITED = 1"),
        ("requirements/core.txt", "# edited"),
    ):
        path = repo_copy / name
        path.write_text(path.read_text() + f"\n{edit}\n")
        assert images.image_tag(tf_spec, repo_copy) != before[1]


def test_image_reference_and_slug() -> None:
    spec = images.spec_for("cpu")
    ref = images.image_ref(spec, "registry.example.org/team/")
    assert ref.startswith("registry.example.org/team/accelpipe/cpu-pytorch:")
    assert containers.image_slug(ref) == "cpu-pytorch-" + ref.rsplit(":", 1)[1]


def test_every_backend_has_an_image_and_unknown_ones_fail() -> None:
    assert {images.spec_for(b).backend for b in ("cpu", "cuda", "rocm", "gaudi")} == {
        "cpu",
        "cuda",
        "rocm",
        "gaudi",
    }
    with pytest.raises(ConfigError, match="tpu-pytorch"):
        images.spec_for("tpu")
