"""Model architectures, one module each."""
