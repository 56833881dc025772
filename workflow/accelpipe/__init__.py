"""accelpipe: reproduce, benchmark and profile reference accelerator training workloads."""

import sys
from pathlib import Path

__version__ = "0.1.0"

# The checkout holding this package (<repo>/workflow/accelpipe): its Dockerfiles, requirements
# and git commit belong to the code that is running.
REPO = Path(__file__).resolve().parents[2]

# jsonschema imports every optional format checker it finds when it is imported; with
# rfc3987-syntax installed (jupyterlab pulls it in, and GPU images ship jupyterlab) that import
# builds a grammar, ~2 CPU-s in every process that validates a config. accelpipe's schemas use
# no format, so the checker is marked absent (jsonschema skips what does not import).
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
