"""A small synthetic NSCLC-Radiomics raw tree, and its series found by their DICOM headers.

Shared by the tests of what `accelpipe.datasets.nsclc_synthetic` writes and of what
`accelpipe.datasets.nsclc` reads and prepares from it.
"""

from __future__ import annotations

from pathlib import Path

import pydicom

from accelpipe.datasets.nsclc_synthetic import synthesize

SHAPE = (24, 28, 8)  # rows, columns, slices
SYNTH = {"patients": 3, "shape": list(SHAPE), "pixel_spacing": 1.5, "slice_thickness": 3.0}


def synth_tree(raw: Path, seed: int = 0, patients: int = 3) -> Path:
    """`<raw>/NSCLC-Radiomics` with SYNTH's geometry."""
    kwargs = {**SYNTH, "patients": patients}
    return synthesize(raw, seed=seed, **kwargs)


def series_dir(root: Path, patient: str, modality: str) -> Path:
    """The folder of `patient`'s series of `modality`, found by header, not by folder name."""
    for folder in sorted((root / patient).iterdir()):
        first = next(folder.iterdir())
        if pydicom.dcmread(first, stop_before_pixels=True).Modality == modality:
            return folder
    raise AssertionError(f"no {modality} series for {patient}")
