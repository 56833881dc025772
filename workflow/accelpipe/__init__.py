"""accelpipe: reproduce, benchmark and profile reference accelerator training workloads."""

from pathlib import Path

__version__ = "0.1.0"

# The checkout holding this package (<repo>/workflow/accelpipe): its Dockerfiles, requirements
# and git commit belong to the code that is running.
REPO = Path(__file__).resolve().parents[2]
