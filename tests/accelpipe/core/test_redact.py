"""accelpipe.core.redact: the credentials of a URL never reach a message, a log or a result."""

from __future__ import annotations

import io
import logging

import pytest
import requests

from accelpipe.core.redact import RedactingFilter, is_secret_parameter, redact, redact_data

SIGNED = (
    "https://bucket.s3.amazonaws.com/Task01.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAEXAMPLE%2F20240101%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
    "&X-Amz-Security-Token=FQoGZXIvYXdzEXAMPLETOKEN&X-Amz-Signature=0123abcdef"
)


def test_user_and_password_are_masked_host_and_path_kept() -> None:
    assert redact("https://alice:s3cr%40t@example.org:8443/data/x.tar") == (
        "https://***@example.org:8443/data/x.tar"
    )


def test_a_raw_at_sign_in_the_password_is_masked_whole() -> None:
    assert redact("http://bob:p@ss@host/file") == "http://***@host/file"


def test_a_token_as_user_name_is_masked() -> None:
    assert redact("https://ghp_0123456789@github.com/org/repo") == "https://***@github.com/org/repo"


def test_an_s3_presigned_url_keeps_only_what_is_not_secret() -> None:
    shown = redact(SIGNED)
    for secret in ("AKIAEXAMPLE", "FQoGZXIvYXdzEXAMPLETOKEN", "0123abcdef"):
        assert secret not in shown
    assert shown.startswith("https://bucket.s3.amazonaws.com/Task01.tar?")
    assert "X-Amz-Signature=***" in shown and "X-Amz-Credential=***" in shown
    assert "X-Amz-Date=20240101T000000Z" in shown and "X-Amz-Expires=3600" in shown


@pytest.mark.parametrize(
    "name",
    [
        "sig",  # Azure SAS
        "signature",
        "Signature",  # CloudFront
        "X-Goog-Signature",
        "X-Goog-Credential",
        "token",
        "access_token",
        "key",
        "api_key",
        "apiKey",
        "AWSAccessKeyId",
        "GoogleAccessId",
        "password",
        "client_secret",
    ],
)
def test_secret_parameters_are_masked(name: str) -> None:
    assert is_secret_parameter(name)
    assert redact(f"https://h/f?a=1&{name}=SECRET&b=2") == f"https://h/f?a=1&{name}=***&b=2"


@pytest.mark.parametrize(
    "name", ["Collection", "Modality", "SeriesInstanceUID", "se", "sp", "sv", "X-Amz-Date"]
)
def test_ordinary_parameters_are_kept(name: str) -> None:
    assert not is_secret_parameter(name)
    url = f"https://h/getSeries?{name}=NSCLC-Radiomics"
    assert redact(url) == url


def test_an_azure_sas_url_loses_only_its_signature() -> None:
    url = (
        "https://acct.blob.core.windows.net/c/f.zip?sv=2022-11-02&se=2030-01-01&sp=r&sig=AbC%2Bd%3D"
    )
    assert redact(url) == (
        "https://acct.blob.core.windows.net/c/f.zip?sv=2022-11-02&se=2030-01-01&sp=r&sig=***"
    )


def test_urls_inside_free_text_are_redacted() -> None:
    # what requests says when a host is unreachable: the URL's path and query, no scheme
    try:
        requests.get("http://127.0.0.1:9/x.tar?token=T0PSECRET", timeout=5)
    except requests.ConnectionError as err:
        text = f"download failed ({err})"
    assert "T0PSECRET" in text  # the HTTP stack itself quotes the secret...
    assert "T0PSECRET" not in redact(text)  # ...and redact takes it out
    assert redact("see https://u:pw@h/a and 'http://h/b?sig=s'") == (
        "see https://***@h/a and 'http://h/b?sig=***'"
    )


def test_text_without_urls_is_unchanged() -> None:
    text = "epoch 3: loss=0.25 lr=0.001; key: value (a@b.org)"
    assert redact(text) == text


def test_redact_data_walks_a_config_slice() -> None:
    slice_ = {"datasets": {"brats": {"source": "msd", "msd": {"url": SIGNED, "md5": "0" * 32}}}}
    clean = redact_data(slice_)
    assert clean["datasets"]["brats"]["msd"]["url"] == redact(SIGNED)
    assert clean["datasets"]["brats"]["msd"]["md5"] == "0" * 32
    assert slice_["datasets"]["brats"]["msd"]["url"] == SIGNED  # a copy: the input is kept
    assert redact_data([1, 2.5, None, True, "x"]) == [1, 2.5, None, True, "x"]


def test_the_log_filter_redacts_messages_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("tests.redact")
    logger.addHandler(handler)
    try:
        logger.warning("downloading %s -> %s", "https://u:pw@h/f?sig=abc", "/data/f")
        try:
            raise ValueError("http://h/f?token=xyz failed")
        except ValueError:
            logger.exception("it broke")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "downloading https://***@h/f?sig=*** -> /data/f" in text
    assert "ValueError: http://h/f?token=*** failed" in text
    for secret in ("pw@", "sig=abc", "token=xyz"):
        assert secret not in text
