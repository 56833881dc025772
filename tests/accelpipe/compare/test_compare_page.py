"""results/compare's folder and page (accelpipe.compare.write, page): every run a row, every
number the one in the run's files, no external resource."""

from __future__ import annotations

import base64
import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from accelpipe.compare.page import NUMBERS, VERDICT_HEADING
from accelpipe.compare.rows import PART_COLUMNS
from accelpipe.compare.write import write_compare
from tests.helpers.run_folders import reference, write_run

# every number cell of a run: its metric, the runs table's numbers, its step and parts
NUMBER_CELLS = {
    "metric_value",
    *(column for _, column in NUMBERS),
    "profiled_step_ms",
    *PART_COLUMNS,
}
# and beside the reference ratio, whether it is comparable (text)
SHOWN = NUMBER_CELLS | {"reference_comparable"}
VERDICT = {True: "comparable", False: "indicative", None: "–"}


class Page(HTMLParser):
    """Rows of the page's tables (data-field cells and their text), images and links."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, dict[tuple[str, str], dict[str, str]]] = {}
        self.marks: dict[tuple[str, str], str] = {}
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self._table = self._row = self._field = None
        self._text = ""
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        self.urls += [a[k] for k in ("src", "href") if a.get(k)]
        if tag == "table":
            self._table = self.tables.setdefault(a["id"], {})
        elif tag == "tr" and "data-run" in a:
            self._row = self._table.setdefault((a["data-workload"], a["data-run"]), {})
            self._key = (a["data-workload"], a["data-run"])
        elif tag == "td" and self._row is not None:
            self._field, self._text = a.get("data-field") or a.get("class"), ""

    def handle_data(self, data: str) -> None:
        self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._field == "marks":
            self.marks[self._key] = self._text
        elif tag == "td" and (self._field or "").startswith("num"):
            raise AssertionError(f"a number cell without data-field: {self._text}")
        elif tag == "td" and self._field:
            self._row[self._field] = self._text
        elif tag == "tr":
            self._row = None
        self._field = None if tag == "td" else self._field


@pytest.fixture
def compared(tmp_path: Path) -> tuple[Path, list[dict]]:
    results = tmp_path / "results"
    runs = [
        write_run(
            results, "resnet50", "bf16", 0.70, (900.0, 850.5, 950.25), 100.0,
            reference=reference(2.25, comparable=True),
        ),
        write_run(
            results, "resnet50", "fp32", 0.76, (400.0, 390.0, 410.0), 250.0,
            reference=reference(1.0, comparable=False),
        ),
        write_run(results, "ssd", "old", 0.2, seconds=33.3, with_performance=False),
    ]  # fmt: skip
    out = tmp_path / "results/compare"
    return out, write_compare(runs, {"cpu": 1.5}, out)


def test_the_folder_has_the_page_tables_and_plots(compared: tuple[Path, list[dict]]) -> None:
    out, rows = compared
    assert sorted(p.name for p in out.iterdir()) == [
        "compare.csv",
        "compare.html",
        "compare.json",
        "quality.png",
        "step_breakdown.png",
        "throughput.png",
    ]
    data = json.loads((out / "compare.json").read_text())
    assert data["runs"] == rows and data["cost"] == {"per_hour": {"cpu": 1.5}}
    with (out / "compare.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [(r["workload"], r["run"]) for r in table] == [(r["workload"], r["run"]) for r in rows]
    assert [float(r["samples_per_s"] or "nan") for r in table[:2]] == [900.0, 400.0]
    assert table[2]["samples_per_s"] == "" and "performance.json" in table[2]["notes"]


def test_every_run_is_a_row_showing_its_files_numbers(compared: tuple[Path, list[dict]]) -> None:
    out, rows = compared
    page = Page((out / "compare.html").read_text())
    for table in ("runs", "steps"):
        assert list(page.tables[table]) == [(r["workload"], r["run"]) for r in rows]
    for row in rows:
        key = (row["workload"], row["run"])
        shown = page.tables["runs"][key] | page.tables["steps"][key]
        assert set(shown) == SHOWN
        assert shown.pop("reference_comparable") == VERDICT[row["reference_comparable"]]
        for field, text in shown.items():
            if row[field] is None:
                assert text in ("–", "none"), field
            else:
                assert float(text) == row[field], field
    assert page.tables["runs"][("ssd", "old")]["reference_ratio"] == "none"
    verdicts = [page.tables["runs"][key]["reference_comparable"] for key in page.tables["runs"]]
    assert verdicts == ["comparable", "indicative", "–"]
    assert page.tables["runs"][("resnet50", "bf16")]["per_step_samples_per_s_p10"] == "850.5"


def test_the_verdict_sits_beside_the_reference_ratio_with_the_note_as_its_title(
    compared: tuple[Path, list[dict]],
) -> None:
    out, _ = compared
    text = (out / "compare.html").read_text()
    headings = text.split("<th>")
    ratio = next(i for i, h in enumerate(headings) if h.startswith("reference ratio<"))
    assert headings[ratio + 1].startswith(f"{VERDICT_HEADING}<")
    cell = text.split('data-field="reference_ratio"', 1)[1].split("<td", 2)[1]
    assert cell.startswith(' data-field="reference_comparable" title="ratio per card: ...')
    assert "the figure&#x27;s input pipeline is DALI, ours tf.data" in text


def test_the_marks_and_the_missing_performance_json_are_on_the_page(
    compared: tuple[Path, list[dict]],
) -> None:
    out, _ = compared
    text = (out / "compare.html").read_text()
    page = Page(text)
    assert "fastest" in page.marks[("resnet50", "bf16")]
    assert "most accurate" not in page.marks[("resnet50", "bf16")]
    assert "most accurate" in page.marks[("resnet50", "fp32")]
    assert page.marks[("ssd", "old")] == ""  # the only ssd run: no comparison, no mark
    assert "no performance.json (published before accelpipe measured throughput)" in text


def test_the_page_is_standalone_with_its_plots_inlined(compared: tuple[Path, list[dict]]) -> None:
    out, _ = compared
    page = Page((out / "compare.html").read_text())
    assert "script" not in page.tags and "link" not in page.tags
    assert len(page.urls) == 3 and all(u.startswith("data:image/png;base64,") for u in page.urls)
    inlined = {base64.b64decode(u.split(",", 1)[1]) for u in page.urls}
    assert inlined == {
        (out / n).read_bytes() for n in ("quality.png", "throughput.png", "step_breakdown.png")
    }
