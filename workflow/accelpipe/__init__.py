"""accelpipe: reproduce, benchmark and profile reference accelerator training workloads."""

__version__ = "0.1.0"
