"""Credentials out of everything accelpipe writes or logs: one redaction for URLs and text.

A dataset URL may carry a secret: `https://user:password@host/...`, or a signed query string
(S3 `X-Amz-Signature` / `X-Amz-Credential` / `X-Amz-Security-Token`, Google
`X-Goog-Signature`, an Azure SAS `sig`, `token`, `access_token`, `api_key`, ...). `redact`
replaces the user info of every URL in a text and the value of every query parameter whose
name says it is a secret with `***`, keeping the rest (scheme, host, path, the parameter
names) so a message still says which file was meant. It works on free text because errors
of the HTTP stack quote a URL, or only its path and query, inside their own words.

Logs (`RedactingFilter`), error messages, provenance.json and the compare page all go
through `redact`; `redact_data` applies it to every string of a JSON-like value.
A secret in a URL's path (`https://host/<token>/file`) cannot be told from a folder name and
is not redacted: use the query string or user info for credentials.
"""

from __future__ import annotations

import logging
import re
from typing import Any

MASK = "***"

# `scheme://userinfo@`: everything up to the last `@` before the host's end, so a password
# holding a raw `@` is masked whole.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#'\"<>]*@")
# `?name=value` / `&name=value` / `;name=value`: the value ends where the parameter, the URL
# or the surrounding quotation does.
_PARAMETER = re.compile(r"(?P<lead>[?&;](?P<name>[A-Za-z0-9_.-]+)=)(?P<value>[^&;#\s'\"<>]+)")
# Parameter names (lower case, `-` and `_` dropped) that end like a secret's: signature,
# sig (Azure SAS), token, access key, credential, password, secret, key (api_key, ...).
_SECRET_NAME = re.compile(
    r"(sig|signature|token|key|keyid|accessid|credential|credentials|password|passwd|pwd"
    r"|secret|auth|authorization|session)$"
)


def is_secret_parameter(name: str) -> bool:
    """True for a query parameter whose value is a credential (by its name)."""
    return bool(_SECRET_NAME.search(re.sub(r"[-_]", "", name.lower())))


def _mask_parameter(match: re.Match[str]) -> str:
    if not is_secret_parameter(match["name"]):
        return match[0]
    return f"{match['lead']}{MASK}"


def redact(text: str) -> str:
    """`text` with the user info of every URL and every secret query value replaced by ***."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _PARAMETER.sub(_mask_parameter, text)


def redact_data(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, strings, numbers) with every string redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(item) for item in value]
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's final message (arguments merged in)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            # the handler's formatter would render the traceback: render it here to redact it
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
