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


def clip(text: str, limit: int = 200) -> str:
    """`text` cut to `limit` characters with an ellipsis: for names and text that come from
    an input (an archive member, a server's answer) quoted in a message, which may be huge."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
