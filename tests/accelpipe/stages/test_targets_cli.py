"""`accelpipe targets`: what the config can build is what `snakemake -n <target>` accepts.

The listings come from the shipped config.yaml and the tiny config (.test/config.yaml), each
in a workflow copy, and are dry-run there: every listed target is planned, a target the
listing leaves out is refused, and --configfile / --config change both alike.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import yaml

from accelpipe.cli import main
from accelpipe.config import registry
from accelpipe.config.schema import run_names, validate
from accelpipe.stages.targets import DEFAULT_CONFIGFILE
from tests.helpers.run_folders import write_run
from tests.workflow.project import REPO, TINY_CONFIG, Project, make_project

SHIPPED_CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
ADD_RUN = "resnet50={runs: {fp16: {precision: fp16}}}"


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Project]:
    """Workflow copies with the shipped and the tiny config as their config.yaml."""
    return {
        "shipped": make_project(tmp_path_factory.mktemp("shipped"), SHIPPED_CONFIG),
        "tiny": make_project(tmp_path_factory.mktemp("tiny"), TINY_CONFIG),
        # every workload of the tiny config has a grid; a merge cannot empty one
        "tiny, no resnet50 grid": make_project(
            tmp_path_factory.mktemp("gridless"),
            {**TINY_CONFIG, "resnet50": {**TINY_CONFIG["resnet50"], "grid": {}}},
        ),
    }


def _targets(
    where: Path,
    *args: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, str, str]:
    """`accelpipe targets <args>` run in `where`: (exit status, stdout, stderr)."""
    monkeypatch.chdir(where)
    code = main(["targets", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _listed(where: Path, *args: str, **fixtures: object) -> list[dict[str, str]]:
    code, out, err = _targets(where, *args, "--json", **fixtures)  # type: ignore[arg-type]
    assert code == 0, err
    return json.loads(out)["targets"]


def _planned_outputs(project: Project, *args: str) -> set[str]:
    """The outputs of every job a dry run plans (it must succeed)."""
    proc = project.snakemake("--dry-run", *args)
    lines = re.findall(r"^\s+output: (.+)$", proc.stdout + proc.stderr, flags=re.MULTILINE)
    return {path for line in lines for path in line.split(", ")}


def _refused(project: Project, *args: str) -> str:
    proc = project.snakemake("--dry-run", *args, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    return output


def test_the_default_config_is_the_snakefiles_configfile() -> None:
    directive = re.search(r'^configfile:\s*"([^"]+)"', (REPO / "Snakefile").read_text(), re.M)
    assert directive is not None and directive[1] == DEFAULT_CONFIGFILE


@pytest.mark.e2e
@pytest.mark.parametrize("config", ["shipped", "tiny"])
def test_snakemake_plans_every_listed_target(
    projects: dict[str, Project],
    config: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = projects[config]
    listed = _listed(project.root, capsys=capsys, monkeypatch=monkeypatch)
    kinds = {t["kind"] for t in listed}
    assert {"fold", "cv", "run", "grid", "benchmark", "benchmark_row", "raw", "prepared"} <= kinds
    paths = [t["path"] for t in listed if t["kind"] != "compare"]  # needs a finished run
    assert _planned_outputs(project, *paths) >= set(paths)


@pytest.mark.parametrize("config", ["shipped", "tiny"])
def test_the_listing_follows_the_config(
    projects: dict[str, Project],
    config: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per workload: folds and cv (unet2d) or its runs and grid runs, a grid only where it has
    one, the benchmark table and its rows, its data; results/compare last."""
    cfg = validate(SHIPPED_CONFIG if config == "shipped" else TINY_CONFIG)  # defaults filled
    listed = _listed(projects[config].root, capsys=capsys, monkeypatch=monkeypatch)
    paths = [t["path"] for t in listed]
    assert len(paths) == len(set(paths))
    folds = cfg["unet2d"]["folds"]
    unet2d = {t["path"] for t in listed if t["kind"] in ("fold", "cv")}
    prefixes = ["" if run == "default" else f"{run}/" for run in run_names(cfg["unet2d"], "unet2d")]
    assert unet2d == {
        f"results/unet2d/{prefix}{name}"
        for prefix in prefixes
        for name in [*(f"fold{k}" for k in range(folds)), "cv"]
    }
    for workload in ("swinunetr", "resnet50", "ssd", "segmenter"):
        runs = {t["path"] for t in listed if t["group"] == workload and t["kind"] == "run"}
        assert runs == {f"results/{workload}/{run}" for run in cfg[workload]["runs"]}
        grid_runs = {
            t["path"] for t in listed if t["group"] == workload and t["kind"] == "grid_run"
        }
        grid = cfg[workload]["grid"]
        assert len(grid_runs) == (math.prod(len(v) for v in grid.values()) if grid else 0)
    grids = [t["path"] for t in listed if t["kind"] == "grid"]
    assert grids == [f"results/{w}/grid" for w in registry.WORKLOADS if cfg[w]["grid"]]
    rows = [t["path"] for t in listed if t["kind"] == "benchmark_row"]
    bench = cfg["resnet50"]["benchmark"]
    batches = bench["batch_sizes"] or [cfg["resnet50"]["train"]["batch_size"]]
    precisions = bench["precisions"]
    assert {r for r in rows if "/resnet50/" in r} == {
        f"work/resnet50/benchmark/{p}-b{b}" for p in precisions for b in batches
    }
    for workload in registry.WORKLOADS.values():
        data = {
            t["path"]
            for t in listed
            if t["group"] == workload.name and t["kind"] in ("raw", "prepared")
        }
        assert data == {
            f"data/raw/{workload.dataset}",
            f"data/prepared/{workload.dataset}/{workload.variant}",
        }
    assert listed[-1] == {
        "path": "results/compare",
        "kind": "compare",
        "group": "all",
        "description": "every finished run on one page (none finished yet: make a run first)",
    }


def test_the_human_listing_is_grouped_one_target_a_line(
    projects: dict[str, Project],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where = projects["shipped"].root
    listed = _listed(where, capsys=capsys, monkeypatch=monkeypatch)
    code, out, _ = _targets(where, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0
    blocks = out.strip().split("\n\n")
    heads = [block.splitlines()[0] for block in blocks]
    assert [h.split(" ")[0] for h in heads] == [*registry.WORKLOADS, "every"]
    assert "unet2d (pytorch; brats data; quality: mean_dice)" in heads
    lines = [line.split() for block in blocks for line in block.splitlines()[1:]]
    assert [line[0] for line in lines] == [t["path"] for t in listed]
    for line, target in zip(lines, listed, strict=True):
        assert " ".join(line[1:]) == target["description"]


@pytest.mark.e2e
def test_compare_is_planned_once_a_run_is_finished(
    projects: dict[str, Project],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = projects["tiny"]
    assert "no finished run yet" in _refused(project, "results/compare")
    write_run(project.root / "results", "resnet50", "fp32")
    try:
        listed = _listed(project.root, capsys=capsys, monkeypatch=monkeypatch)
        compare = [t for t in listed if t["kind"] == "compare"]
        assert compare[0]["description"] == "every finished run on one page (1 finished now)"
        assert "results/compare" in _planned_outputs(project, "results/compare")
    finally:
        shutil.rmtree(project.root / "results")


@pytest.mark.e2e
def test_a_config_override_adding_a_run_lists_it_and_snakemake_plans_it(
    projects: dict[str, Project],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = projects["shipped"]
    before = {t["path"] for t in _listed(project.root, capsys=capsys, monkeypatch=monkeypatch)}
    after = {
        t["path"]
        for t in _listed(project.root, "--config", ADD_RUN, capsys=capsys, monkeypatch=monkeypatch)
    }
    assert after - before == {"results/resnet50/fp16"}  # merged into runs, as Snakemake merges
    assert "results/resnet50/fp16" in _planned_outputs(
        project, "results/resnet50/fp16", "--config", ADD_RUN
    )
    assert "no run 'fp16'" in _refused(project, "results/resnet50/fp16")


@pytest.mark.e2e
def test_configfiles_and_config_merge_over_config_yaml_as_in_snakemake(
    projects: dict[str, Project],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """config.yaml, then each --configfile, then --config: what the listing and the dry run
    both accept (the tiny config's ddp runs; 3 folds instead of 5)."""
    project = projects["shipped"]
    shutil.copy(REPO / ".test" / "config.yaml", project.root / "tiny.yaml")
    args = ("--configfile", "tiny.yaml", "--config", "unet2d={folds: 3}")
    listed = {
        t["path"] for t in _listed(project.root, *args, capsys=capsys, monkeypatch=monkeypatch)
    }
    assert {"results/resnet50/ddp", "results/unet2d/fold2"} <= listed
    assert "results/unet2d/fold3" not in listed
    assert "results/swinunetr/default" in listed  # in both
    planned = _planned_outputs(project, "results/resnet50/ddp", "results/unet2d/fold2", *args)
    assert {"results/resnet50/ddp", "results/unet2d/fold2"} <= planned
    assert "'unet2d.folds' is 3" in _refused(project, "results/unet2d/fold3", *args)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("config", "target", "why"),
    [
        ("tiny", "results/unet2d/fold5", "'unet2d.folds' is 5"),
        ("tiny, no resnet50 grid", "results/resnet50/grid", "'resnet50.grid' is empty"),
        ("tiny", "work/resnet50/benchmark/bf16-b4", "no benchmark row 'bf16-b4'"),
        ("tiny", "results/swinunetr/cv", "swinunetr has no cross-validation"),
    ],
)
def test_what_the_listing_leaves_out_snakemake_refuses(
    projects: dict[str, Project],
    config: str,
    target: str,
    why: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = projects[config]
    assert target not in {
        t["path"] for t in _listed(project.root, capsys=capsys, monkeypatch=monkeypatch)
    }
    assert why in _refused(project, target)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("resnet50={train: {batch_size: 0}}", "'resnet50.train.batch_size'"),
        ("resnet50={trian: {lr: 0.1}}", "'resnet50.trian'"),
        ("segmenter={grid: {model.colour: [red]}}", "'segmenter.grid.model.colour'"),
    ],
)
def test_an_invalid_config_is_one_error_naming_the_key(
    projects: dict[str, Project],
    override: str,
    key: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where = projects["shipped"].root
    code, out, err = _targets(where, "--config", override, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert key in err and "invalid config (config.yaml, --config)" in err
    assert "Traceback" not in err


def test_a_missing_config_is_one_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = _targets(tmp_path, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and "no config.yaml in" in err and "--configfile" in err
    code, _, err = _targets(
        tmp_path, "--configfile", "nowhere.yaml", capsys=capsys, monkeypatch=monkeypatch
    )
    assert code == 2 and "nowhere.yaml" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "bad.yaml").write_text("unet2d: [\n")
    code, _, err = _targets(
        tmp_path, "--configfile", "bad.yaml", capsys=capsys, monkeypatch=monkeypatch
    )
    assert code == 2 and "bad.yaml" in err and "not valid JSON or YAML" in err
