"""The raw stage when two workflows share a data_root (issue 30, item 6): the second waits
for the first and keeps the folder it made; one download between them."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import threading
from pathlib import Path

from accelpipe.core.io import read_json
from accelpipe.datasets.brats import synthesize
from accelpipe.datasets.sources import MADE_FROM, config_key, made_from
from tests.helpers.http_server import FileServer
from tests.helpers.overlap import await_state, gated_route, start_python

TASK = "Task01_BrainTumour"


def _task_archive(tmp_path: Path) -> bytes:
    task = synthesize(tmp_path / "user", cases=5, shape=(32, 32, 16), seed=3)
    archive = tmp_path / f"{TASK}.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(task, arcname=TASK)
    return archive.read_bytes()


def _raw(root: Path, cfg: dict, log: Path) -> subprocess.Popen[bytes]:
    argv = ["-m", "accelpipe", "--log", str(log), "raw", "--dataset", "brats"]
    argv += ["--config-json", json.dumps(cfg), "--out", "data/raw/brats"]
    return start_python([*argv, "--downloads", "data/downloads/brats"], log=log, cwd=root)


def test_a_second_raw_job_waits_and_keeps_the_first_ones_folder(tmp_path: Path) -> None:
    data = _task_archive(tmp_path)
    gate = threading.Event()
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with FileServer(tmp_path) as server:
        server.routes[f"/{TASK}.tar"] = gated_route(data, gate)
        msd = {"url": server.url(f"{TASK}.tar"), "md5": hashlib.md5(data).hexdigest()}
        cfg = {"source": "msd", "msd": msd}
        try:
            first = _raw(tmp_path, cfg, logs[0])
            await_state(lambda: len(server.log) == 1, first)  # mid-download
            second = _raw(tmp_path, cfg, logs[1])
            await_state(lambda: "waiting for" in logs[1].read_text() or len(server.log) > 1, second)
            assert len(server.log) == 1, "the second raw job downloaded at the same time"
        finally:
            gate.set()
        assert first.wait() == 0, logs[0].read_text()
        assert second.wait() == 0, logs[1].read_text()
    assert len(server.log) == 1
    raw = tmp_path / "data/raw/brats"
    assert "made meanwhile by another run from the same config; kept" in logs[1].read_text()
    assert len(list((raw / TASK / "imagesTr").iterdir())) == 5
    assert MADE_FROM in read_json(raw / "stage.json")  # what the next waiting job compares


def test_a_raw_folder_of_another_config_is_not_taken_for_this_one(tmp_path: Path) -> None:
    out = tmp_path / "raw"
    out.mkdir()
    cfg = {"source": "msd", "msd": {"url": "https://u:pw@h/x.tar?sig=1"}}
    (out / "stage.json").write_text(json.dumps({MADE_FROM: config_key(cfg)}))
    assert made_from(out, cfg)
    # a new signature of the same URL is the same data; another URL is not
    assert made_from(out, {"source": "msd", "msd": {"url": "https://u:pw2@h/x.tar?sig=2"}})
    assert not made_from(out, {"source": "msd", "msd": {"url": "https://h/y.tar"}})
    assert not made_from(tmp_path / "missing", cfg)
