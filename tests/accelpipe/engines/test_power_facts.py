"""A train process's energy accounting (engines.energy): stage.json's `power`, and whether the
devices its meter read are the run's."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from accelpipe.devices.power import Energy, NoPower
from accelpipe.engines.energy import power_facts, power_meter


@dataclass
class Meter:
    """A meter that read `devices` and measured 10 J over 2 s."""

    devices: list[str]
    available: bool = True
    stopped: list[bool] = field(default_factory=list)

    def stop(self) -> Energy:
        self.stopped.append(True)
        return Energy(10.0, 2.0, 5.0, "stand-in", "energy counter", 3, 1.0)


@pytest.mark.parametrize(
    ("backend", "devices", "world", "nodes", "incomplete"),
    [
        ("cuda", ["0", "1"], 2, 1, None),
        ("cuda", ["0"], 2, 1, "the meter read 1 of the run's 2 devices (0)"),
        ("cuda", ["0", "1", "2"], 2, 1, "the meter read 3 devices (0, 1, 2) for a run on 2"),
        ("cpu", ["package-0"], 4, 1, None),  # RAPL: the node's packages, every process
        ("cpu", ["package-0"], 4, 2, "RAPL read on one node of the run's 2"),
    ],
)
def test_the_facts_say_where_the_metered_devices_are_not_the_runs(
    backend: str, devices: list[str], world: int, nodes: int, incomplete: str | None
) -> None:
    meter = Meter(devices)
    facts = power_facts(meter, backend=backend, world_size=world, nodes=nodes)  # type: ignore[arg-type]
    assert meter.stopped == [True] and facts["joules"] == 10.0 and facts["devices"] == devices
    if incomplete is None:
        assert facts["incomplete"] is None
    else:
        assert facts["incomplete"].startswith(incomplete)


def test_only_the_process_writing_the_log_meters() -> None:
    with power_meter("cpu", writes_log=False) as meter:
        assert isinstance(meter, NoPower)
    facts = power_facts(meter, backend="cpu", world_size=2, nodes=1)
    assert facts["joules"] is None and facts["devices"] == [] and facts["incomplete"] is None
    assert "not the process writing train_log.csv" in facts["reason"]
