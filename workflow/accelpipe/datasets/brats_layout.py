"""BraTS's raw layout (MSD Task01_BrainTumour), as the Medical Segmentation Decathlon ships it::

    <raw>/Task01_BrainTumour/dataset.json
    <raw>/Task01_BrainTumour/imagesTr/BRATS_001.nii.gz   # 4D (X, Y, Z, 4) float
    <raw>/Task01_BrainTumour/labelsTr/BRATS_001.nii.gz   # 3D (X, Y, Z) uint8, values 0..3
    <raw>/Task01_BrainTumour/imagesTs/

with BraTS's channels and labels, which the synthesizer writes into its dataset.json and the
preparation assumes where a task's dataset.json names none.
"""

from __future__ import annotations

TASK = "Task01_BrainTumour"
MODALITIES = {"0": "FLAIR", "1": "T1w", "2": "t1gd", "3": "T2w"}
LABELS = {"0": "background", "1": "edema", "2": "non-enhancing tumor", "3": "enhancing tumour"}
