"""results/compare links each diff of two runs built beside the runs it shows
(results/<workload>/diff/<A>_vs_<B>/diff.md)."""

from __future__ import annotations

from pathlib import Path

from accelpipe.compare import page
from accelpipe.compare.write import _diff_links


def test_the_page_links_each_diff_built_under_the_runs_workloads(tmp_path: Path) -> None:
    results = tmp_path / "results"
    runs = [results / "resnet50" / "fp32", results / "unet2d" / "default" / "fold0"]
    for folder in (
        results / "resnet50" / "diff" / "fp32_vs_bf16",
        results / "unet2d" / "diff" / "fold0_vs_fold1",
        results / "ssd" / "diff" / "bf16_vs_fp32",  # no run of ssd on the page
        results / "resnet50" / "diff" / "half_made",  # no diff.md: not built
    ):
        folder.mkdir(parents=True)
    for built in (
        "resnet50/diff/fp32_vs_bf16",
        "unet2d/diff/fold0_vs_fold1",
        "ssd/diff/bf16_vs_fp32",
    ):
        (results / built / "diff.md").write_text("# diff\n")
    links = _diff_links(runs, results / "compare")
    assert links == [
        "../resnet50/diff/fp32_vs_bf16/diff.md",
        "../unet2d/diff/fold0_vs_fold1/diff.md",
    ]
    html = page.render([], {}, [], {}, links)
    assert '<a href="../resnet50/diff/fp32_vs_bf16/diff.md">' in html
    assert "<h2>Diffs</h2>" not in page.render([], {}, [], {}, [])
