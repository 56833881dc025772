"""The preflight's resources (plan.capacity): the disk a dataset's data stages and the memory a
train job need, against what there is; one line naming both numbers and the key when short."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from accelpipe.config import registry
from accelpipe.config.schema import run_train, validate
from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.resources import Limit
from accelpipe.plan import capacity
from accelpipe.stages import data as data_stage
from accelpipe.stages import train as train_stage

GB = 10**9


def block(dataset: str, source: str) -> dict:
    return validate({"datasets": {dataset: {"source": source}}})["datasets"][dataset]


def test_full_datasets_need_their_published_sizes() -> None:
    brats = capacity.disk_need("brats", block("brats", "msd"))
    assert brats is not None and (brats.download, brats.prepared) == (7.1 * GB, 35 * GB)
    coco = capacity.disk_need("coco", block("coco", "coco"))
    assert coco is not None and coco.raw == 20.37 * GB + 20.9 * GB


def test_a_copy_read_in_place_needs_its_own_size_times_the_ratio(tmp_path: Path) -> None:
    """A `path:` source of any size (a small MSD-style task here) is measured, not taken for
    the full dataset: CI once refused a 3-case task for want of the full 35 GB."""
    task = tmp_path / "Task01_Small"
    (task / "imagesTr").mkdir(parents=True)
    (task / "imagesTr" / "case.nii.gz").write_bytes(b"\0" * 1000)
    linked = capacity.disk_need("brats", {"source": f"path:{task}"})
    assert linked is not None and (linked.download, linked.extracted) == (0, 0)
    assert linked.prepared == pytest.approx(1000 * 35 / 7.1, abs=1)
    assert str(task) in linked.basis
    assert capacity.disk_need("nsclc", {"source": "path:/nonexistent/elsewhere"}) is None


def test_another_archive_than_the_official_one_has_no_figure() -> None:
    mirror = block("brats", "msd")
    mirror["msd"] = {**mirror["msd"], "url": "http://127.0.0.1/t.tar", "md5": "0" * 32}
    assert capacity.disk_need("brats", mirror) is None
    assert capacity.raw_disk_verdict("brats", mirror, Path("/")) is None


def test_imagenet_import_counts_your_tars(tmp_path: Path) -> None:
    (tmp_path / "train.tar").write_bytes(b"x" * 3000)
    (tmp_path / "val.tar").write_bytes(b"x" * 1000)
    imagenet = block("imagenet", "import")
    imagenet["import"] |= {
        "train_tar": str(tmp_path / "train.tar"),
        "val_tar": str(tmp_path / "val.tar"),
    }
    need = capacity.disk_need("imagenet", imagenet)
    assert need is not None and (need.download, need.extracted) == (0, 4000)


def test_synthetic_needs_scale_with_the_config_counts() -> None:
    small = capacity.disk_need("brats", block("brats", "synthetic"))
    big = validate({"datasets": {"brats": {"synthetic": {"cases": 20}}}})["datasets"]["brats"]
    bigger = capacity.disk_need("brats", big)
    assert small is not None and bigger is not None
    assert bigger.extracted == pytest.approx(2 * small.extracted, rel=1e-6)
    assert 0 < small.prepared < 100 * 10**6  # 10 cases of 64x64x32: megabytes


def test_not_enough_disk_is_one_line_with_both_numbers_and_the_key() -> None:
    line = capacity.disk_verdict("raw", "brats", 14.2 * GB, Path("/data"), "download", 5 * GB)
    assert line is not None and "\n" not in line
    assert "needs ~14.2 GB on /data" in line and "5 GB is free" in line
    assert "data_root" in line and "datasets.brats.source" in line
    assert capacity.disk_verdict("raw", "brats", 4 * GB, Path("/data"), "download", 5 * GB) is None


def test_re_preparing_says_it_needs_twice_the_output(tmp_path: Path) -> None:
    raw = tmp_path / "raw" / "brats"
    raw.mkdir(parents=True)
    (raw / "case.nii.gz").write_bytes(b"x" * 1_000_000)
    out = tmp_path / "prepared" / "brats" / "2d"
    need, basis = capacity.prepared_need("brats", raw)
    assert need == pytest.approx(1_000_000 * 35 / 7.1, abs=1) and "1 MB" in basis
    first = capacity.prepare_disk_verdict("brats", raw, out, free=1000)
    assert first is not None and "twice" not in first
    out.mkdir(parents=True)
    again = capacity.prepare_disk_verdict("brats", raw, out, free=1000)
    assert again is not None and "re-preparing needs twice the output space" in again
    assert capacity.prepare_disk_verdict("brats", raw, out, free=10 * GB) is None


def test_the_raw_stage_refuses_before_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capacity.resources, "free_disk", lambda path: 1000)
    cfg = block("brats", "msd")
    out = tmp_path / "data" / "raw" / "brats"
    args = argparse.Namespace(
        dataset="brats",
        out=str(out),
        downloads=str(tmp_path / "data/downloads/brats"),
        config=cfg,
        config_json=json.dumps(cfg),
    )
    with pytest.raises(DataError, match=r"raw brats: needs ~14.2 GB .* but 1 kB is free"):
        data_stage.run_raw(args)
    assert (
        not out.exists() and not (tmp_path / "data/downloads/brats/Task01_BrainTumour.tar").exists()
    )


def test_full_nsclc_swinunetr_memory() -> None:
    """The default recipe (cache_rate 1.0) on the full dataset: 338 volumes would ask 84 GB;
    the budget (half of a 24 GB machine) bounds the cache, and the verdict fits it."""
    config = validate({"datasets": {"nsclc": {"source": "tcia"}}})
    train = run_train(config["swinunetr"], "swinunetr", "default")
    machine = Limit(24 * GB, "stand-in MemTotal")
    parts = capacity.memory_need("swinunetr", train, True, machine)
    assert parts["cache"] == 12 * GB and parts["loader"] > 0
    assert capacity.memory_verdict("swinunetr", "default", parts, machine) is None
    small = Limit(8 * GB, "the Slurm job's SLURM_MEM_PER_NODE=8000 MB")
    line = capacity.memory_verdict("swinunetr", "default", parts, small)
    assert line is not None and "\n" not in line
    assert "needs ~" in line and "but 8 GB is there (the Slurm job's" in line
    assert "swinunetr.train.cache_memory_gb" in line
    # a config budget replaces the share; the job's Slurm ask follows the same figures
    capped = capacity.memory_need("swinunetr", train | {"cache_memory_gb": 2.0}, True, machine)
    assert capped["cache"] == 2 * GB
    assert capacity.train_mem_mb(config, "swinunetr", "default") > 8000


def test_the_tiny_and_shipped_configs_ask_what_they_asked() -> None:
    config = validate({})
    for workload in registry.WORKLOADS:
        run = "fold0" if workload == "unet2d" else sorted(config[workload]["runs"])[0]
        assert capacity.train_mem_mb(config, workload, run) == 8000
        train = run_train(config[workload], workload, run)
        parts = capacity.memory_need(workload, train, False, None)
        assert "cache" not in parts


def test_the_train_stage_refuses_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real NSCLC (the raw folder says so) in a 4 GB Slurm job: one line, before training."""
    raw = tmp_path / "data" / "raw" / "nsclc"
    raw.mkdir(parents=True)
    (raw / "stage.json").write_text(json.dumps({"source": "tcia"}))
    config = validate({"datasets": {"nsclc": {"source": "tcia"}}})
    train = run_train(config["swinunetr"], "swinunetr", "default")
    job = Limit(4 * GB, "the Slurm job's SLURM_MEM_PER_NODE=4000 MB")
    monkeypatch.setattr(train_stage.resources, "job_memory", lambda: job)
    prepared = tmp_path / "data" / "prepared" / "nsclc" / "nifti"
    args = argparse.Namespace(
        workload="swinunetr", run="default", prepared=str(prepared), config={"train": train}
    )
    with pytest.raises(ConfigError, match=r"train swinunetr/default: needs ~.* but 4 GB is there"):
        train_stage._check_memory(args)
    (raw / "stage.json").write_text(json.dumps({"source": "synthetic"}))
    train_stage._check_memory(args)  # synthetic volumes: the process and the model fit


@pytest.mark.parametrize("workload", sorted(registry.WORKLOADS))
def test_each_workload_page_says_what_real_data_needs(workload: str) -> None:
    """docs/<workload>.md's "Real data" carries the figures the stages check, word for word:
    a changed figure fails here until the page says it too."""
    page = (Path(__file__).parents[3] / "docs" / f"{workload}.md").read_text()
    line = capacity.real_data_line(workload)
    assert f"## Real data\n\n{line}\n" in page, f"docs/{workload}.md, under Real data:\n{line}"


def test_while_snakemake_plans_a_raw_folder_to_make_is_checked(tmp_path: Path) -> None:
    """rules/common.smk's raw_config raises this line before any job starts."""
    huge = {"brats": {"synthetic": {"cases": 100000, "shape": [512, 512, 512]}}}
    config = validate({"data_root": str(tmp_path / "data"), "datasets": huge})
    line = capacity.plan_raw_verdict(config, "brats")
    assert line is not None and line.startswith("raw brats: needs ~131 TB on ")
    assert "(extraction 22.1 TB + prepared 109 TB, from the synthetic counts)" in line
    assert "from the synthetic counts" in line and "fewer items in datasets.brats.synthetic" in line
    (tmp_path / "data" / "raw" / "brats").mkdir(parents=True)  # made: nothing to download
    assert capacity.plan_raw_verdict(config, "brats") is None
    assert capacity.plan_raw_verdict(validate({"data_root": str(tmp_path)}), "brats") is None


def test_a_job_given_the_memory_its_rule_asks_passes_its_own_check() -> None:
    """rules/train.smk's mem_mb and the train stage's check come from the same figures: a
    Slurm job granted exactly mem_mb is not refused by its own preflight."""
    for source, run in (("tcia", "default"), ("synthetic", "default")):
        config = validate({"datasets": {"nsclc": {"source": source}}})
        train = run_train(config["swinunetr"], "swinunetr", run)
        asked = capacity.train_mem_mb(config, "swinunetr", run)
        granted = Limit(asked * 2**20, f"the Slurm job's SLURM_MEM_PER_NODE={asked} MB")
        parts = capacity.memory_need("swinunetr", train, source != "synthetic", granted)
        assert capacity.memory_verdict("swinunetr", run, parts, granted) is None, (asked, parts)
