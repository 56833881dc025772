"""results/compare's folder and page (accelpipe.compare.write, page): every run a row in each
table, every number the one in the run's files (exact in data-value, rounded in the cell),
every heading with its unit and definition, each run's training curves, no external
resource."""

from __future__ import annotations

import base64
import csv
import html
import json
import math
from html.parser import HTMLParser
from pathlib import Path

import pytest

from accelpipe.compare.page import DETAIL, NUMBERS, RUNS, STEPS, exact, show, significant
from accelpipe.compare.write import write_compare
from accelpipe.performance import DEFINITIONS
from accelpipe.results.curves import CURVES_FILE, write_curves
from tests.helpers.run_folders import energy, reference, write_run

TEXT_CELLS = {"reference_comparable", "backend", "device", "precision", "system"}
# the runs table's text cells: which runs its speed and price compare with, its config, warnings
RUN_TEXT_CELLS = {"comparable_group", "config_hash", "warnings"}
VERDICT = {True: "comparable", False: "indicative", None: "–"}
# the compute block the hand-made runs get (performance.json's `compute`)
COMPUTE = {
    "flops_per_sample": 8_213_456_789.0,
    "flops_counted_by": "torch.utils.flop_counter.FlopCounterMode",
    "model_tflops": 7.391,
    "peak_tflops_per_device": 989.0,
    "peak_note": "a peak",
    "mfu": 0.003736,
    "gemm_tflops_per_device": 600.0,
    "gemm": None,
    "gemm_fraction": 0.1232,
    "not_measured": None,
}


class Page(HTMLParser):
    """The page's tables (per row: data-field -> text and -> data-value), their headings
    (text, title), legends, the curves figures, images and links."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, dict[tuple[str, str], dict[str, str]]] = {}
        self.values: dict[str, dict[tuple[str, str], dict[str, str]]] = {}
        self.headings: dict[str, list[tuple[str, str | None]]] = {}
        self.legends: list[str] = []
        self.marks: dict[tuple[str, str], str] = {}
        self.figures: dict[tuple[str, str], str] = {}
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self._table = self._row = self._field = self._th = self._figure = None
        self._legend: str | None = None
        self._text = ""
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        self.urls += [a[k] for k in ("src", "href") if a.get(k)]
        if tag == "table":
            self._id = a["id"]
            self._table = self.tables.setdefault(a["id"], {})
            self.headings[a["id"]] = []
        elif tag == "th":
            self._th, self._text = a.get("title"), ""
        elif tag == "tr" and "data-run" in a:
            self._key = (a["data-workload"], a["data-run"])
            self._row = self._table.setdefault(self._key, {})
            self._values = self.values.setdefault(self._id, {}).setdefault(self._key, {})
        elif tag == "td" and self._row is not None:
            kind = a.get("class") or ""  # marks, or a number cell (that lacks data-field?)
            mine = kind == "marks" or kind.startswith("num")
            self._field, self._text = a.get("data-field") or (kind if mine else None), ""
            if "data-value" in a:
                self._values[a["data-field"]] = a["data-value"]
        elif tag == "dl":
            self._legend = ""
        elif tag == "figure":
            self._figure = (a["data-workload"], a["data-run"])
            self.figures[self._figure] = ""
        elif tag == "img" and self._figure:
            self.figures[self._figure] = a["src"]

    def handle_data(self, data: str) -> None:
        self._text += data
        if self._legend is not None:
            self._legend += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "th":
            self.headings[self._id].append((self._text, self._th))
        elif tag == "td" and self._field == "marks":
            self.marks[self._key] = self._text
        elif tag == "td" and (self._field or "").startswith("num"):
            raise AssertionError(f"a number cell without data-field: {self._text}")
        elif tag == "td" and self._field:
            self._row[self._field] = self._text
        elif tag == "tr":
            self._row = None
        elif tag == "dl":
            self.legends.append(self._legend or "")
            self._legend = None
        elif tag == "figure":
            self._figure = None
        self._field = None if tag == "td" else self._field


def _add_compute(run: Path) -> Path:
    perf = json.loads((run / "performance.json").read_text())
    (run / "performance.json").write_text(json.dumps(perf | {"compute": COMPUTE}))
    return run


def _add_curves(run: Path) -> Path:
    (run / "train_log.csv").write_text("epoch,step,loss,lr\n0,1,2.0,0.1\n0,2,1.5,0.1\n")
    write_curves(run / "train_log.csv", run / "metrics.json", "top1", run / CURVES_FILE)
    return run


@pytest.fixture
def compared(tmp_path: Path) -> tuple[Path, list[dict]]:
    results = tmp_path / "results"
    runs = [
        _add_curves(_add_compute(write_run(
            results, "resnet50", "bf16", 0.70, (900.0, 850.5, 950.25), 100.0,
            reference=reference(2.25, comparable=True), energy_block=energy(51.2345, 12345.6),
        ))),
        _add_curves(_add_compute(write_run(
            results, "resnet50", "fp32", 0.76, (400.0, 390.0, 410.0), 250.0,
            reference=reference(1.0, comparable=False),
        ))),
        write_run(results, "ssd", "old", 0.2, seconds=33.3, with_performance=False),
    ]  # fmt: skip
    out = tmp_path / "results/compare"
    return out, write_compare(runs, {"cpu": 1.5}, out)


# -- rounding -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "value", "text"),
    [
        ("rate", 12345.678, "12350"),  # samples/s: 4 significant digits, fixed notation
        ("rate", 851.2345, "851.2"),
        ("rate", 999.96, "1000"),  # rounding up a decade keeps 4 digits
        ("rate", 0.0123456, "0.01235"),
        ("rate", 900.0, "900.0"),
        ("tflops", 15.23456, "15.2"),  # model TFLOP/s: 3
        ("tflops", 0.000049387, "0.0000494"),
        ("fraction", 0.41234, "41.2"),  # MFU and the ceiling fraction: % to one decimal
        ("fraction", 0.01, "1.0"),
        ("fraction", 0.00037, "0.037"),  # below 1 %: 2 significant digits, never 0.0
        ("fraction", 0.0, "0.0"),
        ("ratio", 2.2512345, "2.25"),
        ("ratio", 1.0, "1.00"),
        ("seconds", 3725.123, "3725"),  # times: 3 significant digits, whole seconds kept
        ("seconds", 33.3, "33.3"),
        ("seconds", 4.56789, "4.57"),
        ("ms", 0.309, "0.309"),
        ("ms", 1050.4, "1050"),
        ("gflop", 12_345_678_901.0, "12.3"),  # FLOPs per sample, in GFLOP
        ("gflop", 3_790_000.0, "0.00379"),
        ("cost", 0.000392777, "0.000393"),  # costs: 3 significant digits
        ("cost", 28.4722, "28.5"),
        ("joules", 51.2345, "51.2"),
        ("kilojoules", 1_234_567.89, "1230"),  # energy per run, in kJ
        ("metric", 0.70123, "0.701"),  # a fraction 0..1, to 3 decimals
        ("metric", 0.0, "0.000"),
        ("count", 16, "16"),
    ],
)
def test_each_kind_of_number_is_rounded_to_what_it_can_mean(
    kind: str, value: float, text: str
) -> None:
    assert show(value, kind) == text


def test_a_missing_number_shows_a_dash_and_the_exact_value_is_json() -> None:
    assert show(None, "rate") == "–"
    assert exact(851.2345) == "851.2345" and exact(None) == "null" and exact(16) == "16"
    assert significant(-0.012345, 3) == "-0.0123" and significant(0, 3) == "0"


def test_every_number_column_has_a_kind_and_a_unit() -> None:
    units = ("/s", "(s)", "(ms)", "(%)", "(J)", "(kJ)", "GFLOP", "TFLOP", "(0..1)", "cost")
    counts = {"world_size", "global_batch", "nodes", "reference_ratio"}  # plain numbers
    for column in NUMBERS.values():
        assert show(1.0, column.kind)
        assert column.field in counts or any(u in column.heading for u in units), column


# -- the folder and the page ----------------------------------------------------------------
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
    # the exact values, not the page's rounding
    assert [float(r["samples_per_s"] or "nan") for r in table[:2]] == [900.0, 400.0]
    assert float(table[0]["flops_per_sample"]) == COMPUTE["flops_per_sample"]
    assert float(table[0]["joules_per_1000_samples"]) == 51.2345
    assert table[2]["samples_per_s"] == "" and "performance.json" in table[2]["notes"]


def test_every_run_is_a_row_showing_its_files_numbers_rounded_and_exact(
    compared: tuple[Path, list[dict]],
) -> None:
    out, rows = compared
    page = Page((out / "compare.html").read_text())
    assert list(page.tables) == ["runs", "detail", "steps"]
    for table in page.tables.values():
        assert list(table) == [(r["workload"], r["run"]) for r in rows]
    for row in rows:
        key = (row["workload"], row["run"])
        shown = {k: v for t in page.tables.values() for k, v in t[key].items()}
        values = {k: v for t in page.values.values() for k, v in t[key].items()}
        assert set(shown) == set(NUMBERS) | TEXT_CELLS | RUN_TEXT_CELLS
        assert set(values) == set(NUMBERS)
        assert shown.pop("config_hash") == "–"  # published before runs recorded it
        assert shown.pop("warnings") == "none"
        group = shown.pop("comparable_group")
        if row["comparable_group"] is None:
            assert group == "none: no FLOPs per sample"
        else:
            assert group == "8.21 GFLOP per sample (2 runs)"
        assert shown.pop("reference_comparable") == VERDICT[row["reference_comparable"]]
        for field in ("backend", "device", "precision"):
            assert shown.pop(field) == row[field]
        assert shown.pop("system") == (row["system"] or "–")
        for field, text in shown.items():
            assert json.loads(values[field]) == row[field], field  # exact, as read
            if row[field] is None:
                assert text == ("none" if field == "reference_ratio" else "–"), field
            else:
                assert text == show(row[field], NUMBERS[field].kind), field
                kind = NUMBERS[field].kind  # % to 0.1 (or finer), metric to 0.001
                close = {"fraction": 0.05, "metric": 5e-4}.get(kind, 0.0)
                assert math.isclose(
                    float(text), _in_unit(field, row[field]), rel_tol=5e-3, abs_tol=close
                ), field
    bf16 = page.tables["runs"][("resnet50", "bf16")] | page.tables["detail"][("resnet50", "bf16")]
    expected = {
        "metric_value": "0.700",
        "samples_per_s": "900.0",
        "time_to_train_s": "100",
        "mfu": "0.37",
        "reference_ratio": "2.25",
        "cost_per_1000_samples": "0.000463",
        "joules_per_1000_samples": "51.2",
        "per_step_samples_per_s_p10": "850.5",
        "per_step_samples_per_s_p90": "950.2",  # 950.25: half to even
        "flops_per_sample": "8.21",
        "model_tflops": "7.39",
        "gemm_fraction": "12.3",
        "joules_per_run": "12.3",
        "world_size": "2",
    }
    assert {k: bf16[k] for k in expected} == expected
    assert page.tables["runs"][("ssd", "old")]["reference_ratio"] == "none"
    verdicts = [page.tables["runs"][key]["reference_comparable"] for key in page.tables["runs"]]
    assert verdicts == ["comparable", "indicative", "–"]


def _in_unit(field: str, value: float) -> float:
    """A file's value in the unit its column shows it in."""
    kind = NUMBERS[field].kind
    return value * {"fraction": 100, "gflop": 1e-9, "kilojoules": 1e-3}.get(kind, 1)


def test_every_heading_names_its_unit_and_has_its_definition(
    compared: tuple[Path, list[dict]],
) -> None:
    out, _ = compared
    text = (out / "compare.html").read_text()
    page = Page(text)
    for table, columns in (("runs", RUNS), ("detail", DETAIL), ("steps", STEPS)):
        headings = dict(page.headings[table])
        assert all(headings.values()), table  # every heading has a title
        for column in columns:
            assert headings[column.heading] == column.definition
    # one definition, used as accelpipe.performance words it, in the titles and the legends
    legends = " ".join(page.legends)
    for key in ("throughput", "stage_throughput", "per_step", "model_tflops", "mfu", "energy"):
        assert DEFINITIONS[key] in legends, key
        assert f'title="{html.escape(DEFINITIONS[key])}"' in text, key
    assert len(page.legends) == 3
    for heading, _ in page.headings["runs"][2:]:  # under the runs table, each but the names
        assert heading in page.legends[0]


def test_the_verdict_sits_beside_the_reference_ratio_with_the_note_as_its_title(
    compared: tuple[Path, list[dict]],
) -> None:
    out, _ = compared
    text = (out / "compare.html").read_text()
    headings = [h for h, _ in Page(text).headings["runs"]]
    assert headings[headings.index("ratio to published (per card)") + 1] == "ratio is"
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


def test_each_runs_training_curves_are_inlined_and_a_run_without_says_so(
    compared: tuple[Path, list[dict]],
) -> None:
    out, rows = compared
    text = (out / "compare.html").read_text()
    page = Page(text)
    assert list(page.figures) == [(r["workload"], r["run"]) for r in rows]
    results = out.parent
    for key in [("resnet50", "bf16"), ("resnet50", "fp32")]:
        data = base64.b64decode(page.figures[key].split(",", 1)[1])
        assert data == (results.joinpath(*key) / CURVES_FILE).read_bytes()
    assert page.figures[("ssd", "old")] == ""  # no image: published before the curves
    assert "no training_curves.png (published before accelpipe drew them)" in text


def test_the_page_is_standalone_with_its_plots_inlined(compared: tuple[Path, list[dict]]) -> None:
    out, _ = compared
    page = Page((out / "compare.html").read_text())
    assert "script" not in page.tags and "link" not in page.tags
    assert len(page.urls) == 3 + 2 and all(
        u.startswith("data:image/png;base64,") for u in page.urls
    )
    inlined = {base64.b64decode(u.split(",", 1)[1]) for u in page.urls}
    assert {
        (out / n).read_bytes() for n in ("quality.png", "throughput.png", "step_breakdown.png")
    } <= inlined


# -- what the page warns of (issue 30 items 13 and 14) ---------------------------------------
HOST = {  # devices.host.HostWindow's facts: a busy competitor took half of the 2 CPUs
    "cpu_model": "Some CPU @ 2.0GHz",
    "cores": 2,
    "usable_cpus": 2,
    "load_average_start": [0.5, 0.4, 0.3],
    "load_average_end": [2.9, 1.2, 0.6],
    "window_s": 20.0,
    "job_cpu_s": 20.0,
    "other_cpu_s": 20.0,
    "not_measured": None,
}


def _disagreeing(run: Path) -> Path:
    """The run's profiled step 1.5 times its measured one."""
    perf = json.loads((run / "performance.json").read_text())
    perf["profiled_step"] |= {"ratio": 1.5, "agrees": False, "note": "the profiled step DISAGREES"}
    (run / "performance.json").write_text(json.dumps(perf))
    return run


@pytest.fixture
def warned(tmp_path: Path) -> str:
    """A page of a tiny and two shipped-size resnet50 runs: the tiny one fastest by far, one
    shipped run stale and trained on an oversubscribed host, every profiled step disagreeing."""
    from accelpipe.performance.host_load import host_load

    results = tmp_path / "results"
    runs = [
        write_run(results, "resnet50", "tiny", 0.3, (9000.0, 1, 1), flops_per_sample=2e6,
                  config_hash="1" * 64),
        write_run(results, "resnet50", "bf16", 0.7, (900.0, 1, 1), flops_per_sample=4e9,
                  config_hash="2" * 64, host=host_load(HOST)),
        write_run(results, "resnet50", "fp32", 0.76, (400.0, 1, 1), flops_per_sample=4e9,
                  config_hash="3" * 64, host=host_load(HOST | {"other_cpu_s": 0.1})),
    ]  # fmt: skip
    current = {"resnet50/tiny": "1" * 64, "resnet50/bf16": "f" * 64, "resnet50/fp32": "3" * 64}
    out = tmp_path / "compare"
    write_compare([_disagreeing(run) for run in runs], {"cpu": 1.0}, out, current)
    return (out / "compare.html").read_text()


def test_fastest_is_marked_only_among_runs_of_one_model_and_input(warned: str) -> None:
    page = Page(warned)
    assert "fastest" not in page.marks[("resnet50", "tiny")]  # 10x faster, a tiny model
    assert "fastest" in page.marks[("resnet50", "bf16")]
    runs = page.tables["runs"]
    assert runs[("resnet50", "tiny")]["comparable_group"] == "0.002 GFLOP per sample: no other run"
    assert runs[("resnet50", "bf16")]["comparable_group"] == "4 GFLOP per sample (2 runs)"


def test_the_stale_run_and_the_loaded_host_are_flagged_as_text(warned: str) -> None:
    runs = Page(warned).tables["runs"]
    assert runs[("resnet50", "bf16")]["config_hash"] == "2" * 12
    assert runs[("resnet50", "bf16")]["warnings"] == (
        "⚠ stale config · ⚠ host oversubscribed · ⚠ profiled step disagrees"
    )
    assert runs[("resnet50", "fp32")]["warnings"] == "⚠ profiled step disagrees"
    summary = warned.split('<ul id="warnings">', 1)[1].split("</ul>", 1)[0]
    assert "⚠ stale config: 1 of 3 runs (resnet50/bf16)" in summary
    assert "⚠ host oversubscribed: 1 of 3 runs (resnet50/bf16)" in summary
    assert "other processes used 50% of the 2 CPUs" in summary
    # the profiled step's disagreement, once only a title's ⚠: visible text on the page
    assert "⚠ profiled step disagrees: 3 of 3 runs" in summary
    assert "⚠ host: host oversubscribed" in warned.split('<ul id="notes">', 1)[1]


def test_a_page_without_warnings_says_so(compared: tuple[Path, list[dict]]) -> None:
    out, _ = compared
    assert '<p class="muted" id="warnings">No warnings' in (out / "compare.html").read_text()
