"""A full disk (ENOSPC) in each stage that writes much: download, extraction, prepare and
the train checkpoints. Each is one line naming the path and the space left, as a DataError
is, and what was already on the disk stays as it was. The disk is a real, small tmpfs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelpipe.config.schema import validate
from accelpipe.core.errors import DataError
from accelpipe.datasets.archives import safe_extract
from accelpipe.datasets.download import download, part_path
from accelpipe.plan import stage_config
from tests.helpers.archives import schema_limits
from tests.helpers.dataset_config import run_raw
from tests.helpers.http_server import FileServer
from tests.helpers.small_disk import fill, small_disk

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[2]
EARLIER = b"an output written before the disk filled up\n" * 100


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB disk holding one earlier output, earlier.bin."""
    with small_disk(tmp_path / "disk", "2m") as mounted:
        (mounted / "earlier.bin").write_bytes(EARLIER)
        yield mounted
        assert (mounted / "earlier.bin").read_bytes() == EARLIER  # untouched


def _names_full_disk(message: str, path: Path) -> None:
    assert message.startswith(f"{path}: No space left on device ("), message
    assert "free" in message and "\n" not in message and "Traceback" not in message


def test_download(disk: Path, tmp_path: Path) -> None:
    www = tmp_path / "www"
    www.mkdir()
    (www / "big.bin").write_bytes(os.urandom(3 * MIB))
    with FileServer(www) as server, pytest.raises(DataError) as err:
        download(server.url("big.bin"), disk / "big.bin", backoff_s=0.0, progress=False)
    _names_full_disk(str(err.value), part_path(disk / "big.bin"))  # kept: a rerun resumes
    assert not (disk / "big.bin").exists()


def test_extraction(disk: Path, tmp_path: Path) -> None:
    archive = tmp_path / "big.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("top/noise.bin", os.urandom(3 * MIB))
    with pytest.raises(DataError) as err:
        safe_extract(archive, disk / "out", limits=schema_limits())
    _names_full_disk(str(err.value), disk / "out")
    assert sorted(p.name for p in disk.iterdir()) == ["earlier.bin"]  # no temporary left


def test_prepare_through_the_cli(disk: Path, tmp_path: Path) -> None:
    """The stage as a rule runs it: exit status 2 and one line, from its worker processes."""
    raw = tmp_path / "raw"
    synthetic = {"cases": 5, "shape": [16, 16, 16], "seed": 0}
    run_raw("brats", {"source": "synthetic", "synthetic": synthetic}, raw, tmp_path / "dl")
    out = disk / "prepared" / "brats" / "2d"
    cfg = json.dumps(stage_config.prepare(validate({}), "brats", "2d"))
    argv = ["prepare", "--dataset", "brats", "--variant", "2d", "--raw", str(raw)]
    argv += ["--config-json", cfg, "--out", str(out), "--workers", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    proc = subprocess.run(
        [sys.executable, "-m", "accelpipe", "--framework", "pytorch", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "accelpipe prepare:" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    _names_full_disk(errors[0].split("accelpipe prepare: ", 1)[1], out)
    assert not out.exists() and not list(out.parent.iterdir())  # no half output, no temp


@pytest.mark.torch
def test_torch_checkpoint(disk: Path) -> None:
    import torch

    from accelpipe.config.settings import ProfileSettings
    from accelpipe.devices.torch_device import resolve
    from accelpipe.engines.torch_trainer import CHECKPOINT, Trainer, TrainJob
    from tests.accelpipe.engines.test_torch_trainer import SCHEDULE, STEPS, _batches
    from tests.helpers.settings import torch_train

    def trainer() -> Trainer:
        # ~300 kB of checkpoint (weights and AdamW's two moments)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4096), torch.nn.Linear(4096, 2))
        job = TrainJob(model, torch.nn.functional.cross_entropy, _batches, STEPS)
        cfg = torch_train(epochs=2, lr=0.01, scheduler="cosine")
        return Trainer(job, resolve("cpu"), cfg, ProfileSettings(False, SCHEDULE), disk / "work")

    def fill_after_first(epoch: int) -> None:
        if epoch == 1:  # the first epoch's checkpoint is written: leave less than another
            fill(disk, leave_bytes=120_000)

    with pytest.raises(DataError) as err:
        trainer().fit(on_epoch_end=fill_after_first)
    _names_full_disk(str(err.value), disk / "work" / CHECKPOINT)
    (disk / "filler.bin").unlink()
    assert not (disk / "work" / f"{CHECKPOINT}.tmp").exists()
    again = trainer()
    assert again.resume() and again.epoch == 1  # the first epoch's checkpoint is whole


@pytest.mark.tensorflow
def test_tf_checkpoint(disk: Path) -> None:
    from accelpipe.core.keras2 import tf
    from accelpipe.engines.tf_trainer import TFTrainer

    weights = tf.Variable(tf.zeros([300_000]))  # 1.2 MB a checkpoint: one fits, two do not
    folder = disk / "checkpoints"
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(w=weights), str(folder), 1)
    trainer = types.SimpleNamespace(manager=manager, step=1)
    TFTrainer._save_checkpoint(trainer)  # type: ignore[arg-type]
    weights.assign(tf.ones([300_000]))
    trainer.step = 2
    with pytest.raises(DataError) as err:
        TFTrainer._save_checkpoint(trainer)  # type: ignore[arg-type]
    message = str(err.value)
    assert message.startswith(f"{folder}: no space left on device for the checkpoint of step 2")
    assert "free" in message and "\n" not in message
    assert not list(folder.glob("*_temp*"))
    tf.train.Checkpoint(w=weights).restore(manager.latest_checkpoint).assert_consumed()
    assert manager.latest_checkpoint.endswith("ckpt-1") and float(weights[0]) == 0.0
