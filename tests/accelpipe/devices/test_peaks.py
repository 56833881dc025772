"""The published dense peaks: the table, the model a device name maps to, the row a run's
precision takes, and the reason where there is none."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accelpipe.core.errors import DataError
from accelpipe.devices import peaks

# Every model the brief lists, and its bf16 row (None: the vendor publishes none)
BF16 = {
    "H100 SXM": 989,
    "H100 PCIe": 756,
    "H200 SXM": 989,
    "A100": 312,
    "V100 SXM2": None,
    "V100 PCIe": None,
    "MI300X": 1307.4,
    "MI250X": 191.5,
    "Gaudi": 60,
    "Gaudi2": 432,
    "Gaudi3": 1835,
}


def test_the_shipped_table_validates_and_covers_every_model_and_precision() -> None:
    rows = peaks.load_peaks()
    models = {device for device, _ in rows}
    assert models == set(BF16)
    for model in models:
        for precision in ("bf16", "fp16", "fp32"):
            assert (model, precision) in rows, (model, precision)
    for (model, precision), row in rows.items():
        assert row.source and row.note, (model, precision)
    assert {model: rows[model, "bf16"].tflops for model in models} == BF16
    # tf32 rows only where fp32 products can run on TF32 tensor cores
    assert {m for m, p in rows if p == "tf32"} == {
        "H100 SXM",
        "H100 PCIe",
        "H200 SXM",
        "A100",
        "MI300X",
    }


def test_every_variant_names_a_model_of_the_table_or_one_without_rows_on_purpose() -> None:
    models = {device for device, _ in peaks.load_peaks()}
    named = {model for variants in peaks.VARIANTS.values() for _, model in variants}
    assert named - models == {"H100 NVL", "H200 NVL"}


@pytest.mark.parametrize(
    ("backend", "name", "model"),
    [
        ("cuda", "NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("cuda", "NVIDIA H100 SXM5 80GB", "H100 SXM"),
        ("cuda", "NVIDIA H100 PCIe", "H100 PCIe"),
        ("cuda", "NVIDIA H100 NVL", "H100 NVL"),
        ("cuda", "NVIDIA H100", None),  # SXM or PCIe? the name does not say
        ("cuda", "NVIDIA H200", "H200 SXM"),
        ("cuda", "NVIDIA H200 NVL", "H200 NVL"),
        ("cuda", "NVIDIA A100-SXM4-80GB", "A100"),
        ("cuda", "NVIDIA A100 80GB PCIe", "A100"),
        ("cuda", "Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("cuda", "Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("cuda", "Tesla V100-FHHL-16GB", None),
        ("rocm", "AMD Instinct MI300X", "MI300X"),
        ("rocm", "AMD Instinct MI250X / MI250", "MI250X"),
        ("gaudi", "GAUDI", "Gaudi"),
        ("gaudi", "GAUDI2", "Gaudi2"),
        ("gaudi", "GAUDI3", "Gaudi3"),
        ("cpu", "cpu (x86_64, 2 threads)", None),
        ("cuda", "some card", None),
    ],
)
def test_device_model_from_the_reported_name(backend: str, name: str, model: str | None) -> None:
    assert peaks.device_model(backend, name) == model


def test_a_bf16_run_on_an_h100_sxm_takes_the_bf16_row() -> None:
    peak, note = peaks.lookup("cuda", "NVIDIA H100 80GB HBM3", "bf16")
    assert peak is not None
    assert (peak.device, peak.precision, peak.tflops) == ("H100 SXM", "bf16", 989.0)
    assert "nvidia.com" in peak.source and "sparsity" in peak.note
    assert note.startswith("H100 SXM, the bf16 peak: 989 TFLOP/s dense")
    assert peaks.dense_peak("cuda", "NVIDIA H100 80GB HBM3", "bf16") == peak
    assert peak.as_dict()["tflops"] == 989.0


def test_an_fp32_run_takes_the_tf32_row_only_when_its_products_run_as_tf32() -> None:
    a100 = "NVIDIA A100-SXM4-40GB"
    fp32, note = peaks.lookup("cuda", a100, "fp32")
    assert fp32 is not None and (fp32.precision, fp32.tflops) == ("fp32", 19.5)
    assert "without TF32" in note
    tf32, note = peaks.lookup("cuda", a100, "fp32", tf32=True)
    assert tf32 is not None and (tf32.precision, tf32.tflops) == ("tf32", 156.0)
    assert "TF32 tensor cores" in note
    # bf16 is bf16 whatever the switch
    bf16 = peaks.dense_peak("cuda", a100, "bf16", tf32=True)
    assert bf16 is not None and bf16.precision == "bf16"
    # Volta has no TF32: the fp32 row, and the note says why
    v100, note = peaks.lookup("cuda", "Tesla V100-SXM2-16GB", "fp32", tf32=True)
    assert v100 is not None and (v100.precision, v100.tflops) == ("fp32", 15.7)
    assert "no tf32 peak" in note


@pytest.mark.parametrize(
    ("backend", "name", "precision", "reason"),
    [
        ("cpu", "cpu (x86_64, 2 threads)", "fp32", "cpu: no published dense peak"),
        ("cuda", "X", "bf16", "unknown device 'X' (cuda)"),
        ("cuda", "NVIDIA H100", "bf16", "the name does not say which H100"),
        ("cuda", "NVIDIA H100 NVL", "bf16", "no dense peak for H100 NVL in peaks.yaml"),
        ("cuda", "NVIDIA GH200 480GB", "bf16", "no dense peak for GH200"),
        ("cuda", "Tesla V100-SXM2-16GB", "bf16", "V100 SXM2 bf16: no published dense peak"),
        ("gaudi", "GAUDI3", "fp32", "Gaudi3 fp32: no published dense peak"),
        ("cuda", "NVIDIA A100-SXM4-40GB", "fp8", "unknown precision 'fp8'"),
    ],
)
def test_no_peak_says_why(backend: str, name: str, precision: str, reason: str) -> None:
    peak, note = peaks.lookup(backend, name, precision)
    assert peak is None and reason in note
    assert peaks.dense_peak(backend, name, precision) is None


def test_mi250x_rows_are_per_die_as_rocm_shows_them() -> None:
    peak = peaks.dense_peak("rocm", "AMD Instinct MI250X", "fp32")
    assert peak is not None and peak.tflops == 47.9 and "two" in peak.note


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "peaks.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


ROW = {"device": "A100", "precision": "bf16", "tflops": 312, "source": "s", "note": "n"}


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"peaks": [{**ROW, "precision": "fp8"}]}, "peaks.0.precision"),
        ({"peaks": [{**ROW, "tflops": -1}]}, "peaks.0.tflops"),
        ({"peaks": [{k: v for k, v in ROW.items() if k != "source"}]}, "peaks.0"),
        ({"peaks": [{**ROW, "extra": 1}]}, "peaks.0"),
        ({"rows": []}, "<root>"),
        ({"peaks": [ROW, ROW]}, "peaks.1"),
    ],
)
def test_a_bad_table_fails_naming_the_file_and_key(tmp_path: Path, data: object, key: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(DataError, match=rf"peaks\.yaml: key '{key}'"):
        peaks.load_peaks(path)


def test_an_unreadable_table_fails_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"missing\.yaml: cannot read the device peaks"):
        peaks.load_peaks(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("peaks: [\n")
    with pytest.raises(DataError, match=r"broken\.yaml: cannot read"):
        peaks.load_peaks(broken)


def test_a_null_row_in_another_table_gives_its_note(tmp_path: Path) -> None:
    path = _write(tmp_path, {"peaks": [{**ROW, "tflops": None, "note": "not published"}]})
    peak, note = peaks.lookup("cuda", "NVIDIA A100-PCIE-40GB", "bf16", path=path)
    assert peak is None and note == "A100 bf16: no published dense peak (not published)"
    peak, note = peaks.lookup("cuda", "NVIDIA A100-PCIE-40GB", "fp16", path=path)
    assert peak is None and note == "no fp16 peak for A100 in peaks.yaml"


@pytest.mark.parametrize(
    ("backend", "switches", "by_kind", "expected"),
    [
        # PyTorch's defaults: convolutions TF32, matmuls full fp32
        ("cuda", {"matmul": False, "conv": True}, {"conv": 90, "matmul": 10}, True),  # a ResNet
        (
            "cuda",
            {"matmul": False, "conv": True},
            {"conv": 10, "matmul": 60, "attention": 30},
            False,
        ),
        ("cuda", {"matmul": True, "conv": True}, {"conv": 10, "matmul": 90}, True),  # TensorFlow
        ("cuda", {"matmul": False, "conv": False}, {"conv": 100}, False),
        ("cuda", {"matmul": True, "conv": False}, {"conv": 50, "matmul": 50}, False),  # a tie: no
        ("cuda", {"matmul": True, "conv": True}, None, True),  # no count: both must allow it
        ("cuda", {"matmul": False, "conv": True}, {}, False),
        ("rocm", {"matmul": True, "conv": True}, {"matmul": 100}, False),  # cuda only
        ("cpu", {"matmul": True, "conv": True}, {"matmul": 100}, False),
    ],
)
def test_fp32_uses_tf32(backend: str, switches: dict, by_kind: dict | None, expected: bool) -> None:
    assert peaks.fp32_uses_tf32(backend, switches, by_kind) is expected
