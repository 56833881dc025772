"""devices/__init__: the train stage's memory facts, the host's side of them measured here."""

from __future__ import annotations

import psutil

from accelpipe.devices import memory_facts, peak_host_rss_bytes

MIB = 2**20


def test_peak_rss_remembers_memory_since_freed() -> None:
    before = psutil.Process().memory_info().rss
    block = b"\x01" * (64 * MIB)  # written, so resident
    del block
    assert peak_host_rss_bytes() >= before + 60 * MIB


def test_memory_facts_carry_the_devices_peak_and_the_hosts() -> None:
    facts = memory_facts((None, None))
    assert facts["peak_device_memory_bytes"] is None and facts["device_memory_source"] is None
    assert 0 < facts["peak_host_rss_bytes"] <= peak_host_rss_bytes()  # a peak never drops
    assert memory_facts((5, "src"))["peak_device_memory_bytes"] == 5
