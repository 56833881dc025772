"""NSCLC-Radiomics' raw layout (TCIA; the same for the synthetic, tcia and path: sources)::

    <raw>/NSCLC-Radiomics/<PatientID>/<SeriesInstanceUID>/*.dcm

with one folder per series: the SEG series (one multi-frame SEG object) and the CT series it
references (one file per slice, named `1-001.dcm`... as in NBIA's zips, which hold the series'
files flat). Preparation finds series by reading headers, not by folder names, so a copy in
NBIA Data Retriever's deeper layout (`<PatientID>/<study>/<series>/`) works through `path:` too.
The folder is always called NSCLC-Radiomics, whatever collection name the API is asked for.
"""

from __future__ import annotations

COLLECTION = "NSCLC-Radiomics"
