"""One exception type for problems the user can fix (bad input, bad config, missing data).

The CLI prints these as a single line naming the file or key, without a traceback.
"""


class AccelpipeError(Exception):
    """A user-facing error: the message must name the offending file, key or URL."""


class ConfigError(AccelpipeError):
    """The config is invalid: unknown key, wrong type or a value out of range."""


class DataError(AccelpipeError):
    """A dataset file is missing, corrupt or inconsistent."""


class BackendUnavailableError(AccelpipeError):
    """The requested backend's runtime (CUDA, ROCm, habana_frameworks) is not present."""
