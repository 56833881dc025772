"""devices/doctor: each check's ok, problem and skipped paths, judged from stand-in facts (a
vendor tool's answer, a framework's), the device nodes of a stand-in /dev, the report's lines
and JSON, and the whole doctor over stand-in tools on PATH."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from accelpipe.devices import doctor, smi
from accelpipe.devices.doctor import OK, PROBLEM, SKIPPED, FrameworkFacts, Needs
from tests.helpers.fake_smi import (
    H100,
    app_row,
    gpu_row,
    install_nvidia_smi,
    path_without_vendor_tools,
)

OTHER_UID = 4242  # a user who is not us
MIB_80G = 81559.0


def device(i: int, *, used: float = 3.0, cap: str = "9.0", processes=(), arch=None):
    return smi.DeviceInfo(str(i), H100, MIB_80G, used, MIB_80G - used, cap, arch, tuple(processes))


def vendor(n: int = 2, devices=None, listed: bool = True) -> smi.Vendor:
    return smi.Vendor("nvidia-smi", "550.54.15", devices or [device(i) for i in range(n)], listed)


def facts(n: int = 2, **changes) -> FrameworkFacts:
    """A CUDA build of torch that sees `n` H100s, with bf16 and NCCL."""
    base = FrameworkFacts(
        "pytorch",
        "torch 2.6.0+cu124, built with CUDA 12.4",
        True,
        device_api="torch.cuda",
        device_names=[H100] * n,
        bf16=True,
        bf16_basis="torch.cuda.is_bf16_supported() is True",
        collective=True,
        collective_name="NCCL",
        collective_basis="torch.distributed.is_nccl_available() is True, version 2.21.5",
        collective_fix="use a torch build with NCCL",
    )
    return replace(base, **changes)


def judged(check: doctor.Check, status: str, *words: str) -> None:
    text = f"{check.found} {check.fix or ''}"
    assert check.status == status, check
    assert (check.fix is not None) == (status == PROBLEM), check
    for word in words:
        assert word in text, (word, check)


# --- driver -------------------------------------------------------------------------------


def test_driver_ok_names_the_tool_the_driver_and_the_devices() -> None:
    judged(doctor.check_driver("cuda", vendor(8)), OK, "nvidia-smi", "550.54.15", "0-7", H100)


@pytest.mark.parametrize(
    ("backend", "tool"),
    [("cuda", "nvidia-smi"), ("rocm", "rocm-smi or amd-smi"), ("gaudi", "hl-smi")],
)
def test_driver_missing_names_the_tool_and_how_to_install_it(backend: str, tool: str) -> None:
    missing = smi.ToolMissing(smi.TOOLS[backend])
    judged(doctor.check_driver(backend, missing), PROBLEM, f"{tool} not found", "install")


def test_driver_that_does_not_answer_says_what_the_tool_said() -> None:
    failed = smi.ToolFailed("nvidia-smi failed with exit status 9: couldn't communicate")
    check = doctor.check_driver("cuda", failed)
    judged(check, PROBLEM, "exit status 9: couldn't communicate", "install the NVIDIA driver")


def test_driver_is_skipped_on_the_cpu() -> None:
    judged(doctor.check_driver("cpu", None), SKIPPED, "cpu")


# --- framework ----------------------------------------------------------------------------


def test_framework_ok_names_the_build_and_what_it_sees() -> None:
    judged(doctor.check_framework("cuda", facts(2)), OK, "CUDA 12.4", f"2 x {H100}")


def test_framework_built_for_another_device_is_a_problem_with_its_fix() -> None:
    cpu_build = facts(
        built_for_backend=False,
        build="torch 2.13.0+cpu is a CPU build",
        build_fix="run in the cuda-pytorch image",
        device_names=None,
    )
    judged(doctor.check_framework("cuda", cpu_build), PROBLEM, "CPU build", "cuda-pytorch image")


def test_framework_that_sees_no_device_is_a_problem() -> None:
    blind = facts(device_names=[], unavailable="torch.cuda.is_available() is False")
    judged(
        doctor.check_framework("cuda", blind), PROBLEM, "is_available() is False", "CUDA_VISIBLE"
    )


def test_framework_that_does_not_import_is_a_problem() -> None:
    judged(doctor.check_framework("cuda", "cannot import pytorch: no torch"), PROBLEM, "no torch")


def test_framework_on_the_cpu_is_any_build() -> None:
    judged(doctor.check_framework("cpu", facts(device_names=None)), OK, "any build")


# --- devices ------------------------------------------------------------------------------


def test_devices_ok_when_the_biggest_job_fits() -> None:
    check = doctor.check_devices("cuda", Needs(devices=8), vendor(8), facts(8))
    judged(check, OK, "8 usable (0-7)", "sees 8", "asks 8")


def test_too_few_visible_devices_is_a_problem_naming_both_counts() -> None:
    check = doctor.check_devices("cuda", Needs(devices=8), vendor(2), facts(2))
    judged(check, PROBLEM, "2 usable", "asks 8", "at most 2 devices")


def test_the_pool_limits_the_usable_devices() -> None:
    check = doctor.check_devices("cuda", Needs(devices=2, pool=["3"]), vendor(4), facts(4))
    judged(check, PROBLEM, "1 usable (3) within accelerators.pool [3]")


def test_a_pool_naming_devices_the_tool_lacks_is_a_problem() -> None:
    check = doctor.check_devices("cuda", Needs(pool=["0", "9"]), vendor(2), facts(2))
    judged(check, PROBLEM, "names 9", "lists 0, 1")


def test_a_framework_seeing_fewer_devices_than_the_tool_is_a_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    check = doctor.check_devices("cuda", Needs(devices=2), vendor(2), facts(1))
    judged(check, PROBLEM, "sees 1", "CUDA_VISIBLE_DEVICES='0'")


def test_devices_are_skipped_on_the_cpu_and_without_any_list() -> None:
    judged(doctor.check_devices("cpu", Needs(), None, facts()), SKIPPED)
    missing = smi.ToolMissing(["nvidia-smi"])
    judged(doctor.check_devices("cuda", Needs(), missing, "no torch"), SKIPPED, "see driver")


# --- busy ---------------------------------------------------------------------------------


def _process(pid: int, uid: int | None, used: float = 40960.0) -> smi.Process:
    return smi.Process(pid, "python", used, uid, None if uid is None else f"user{uid}")


def test_free_devices_are_ok() -> None:
    judged(doctor.check_busy("cuda", Needs(), vendor(8), uid=0), OK, "none of the 8")


def test_another_users_process_makes_a_device_busy_and_names_the_free_ones() -> None:
    taken = [
        device(i, used=40963.0, processes=[_process(100 + i, OTHER_UID)])
        if i in (2, 5)
        else device(i)
        for i in range(8)
    ]
    check = doctor.check_busy("cuda", Needs(), vendor(devices=taken), uid=0)
    judged(check, PROBLEM, "2 of 8 devices are in use", "user4242", "pool: [0, 1, 3, 4, 6, 7]")


def test_every_device_busy_leaves_no_pool_to_suggest() -> None:
    taken = [device(i, used=40963.0, processes=[_process(i, OTHER_UID)]) for i in range(2)]
    check = doctor.check_busy("cuda", Needs(), vendor(devices=taken), uid=0)
    judged(check, PROBLEM, "2 of 2 devices are in use", "every device is in use")


def test_own_processes_are_noted_not_a_problem() -> None:
    mine = [device(0, used=40963.0, processes=[_process(7, 0)]), device(1)]
    judged(doctor.check_busy("cuda", Needs(), vendor(devices=mine), uid=0), OK, "your own", "pid 7")


def test_a_process_whose_owner_is_hidden_counts_as_another_users() -> None:
    hidden = [device(0, used=40963.0, processes=[_process(7, None)])]
    check = doctor.check_busy("cuda", Needs(), vendor(devices=hidden), uid=0)
    judged(check, PROBLEM, "a user /proc does not show")


def test_memory_used_by_no_listed_process_is_busy_too() -> None:
    """Inside a container nvidia-smi lists no host process; the memory still shows."""
    unseen = [device(0, used=30000.0), device(1)]
    check = doctor.check_busy("cuda", Needs(), vendor(devices=unseen, listed=False), uid=0)
    judged(check, PROBLEM, "1 of 2", "29.3 of 79.6 GiB used by processes the tool does not list")


def test_busy_is_skipped_without_devices() -> None:
    judged(doctor.check_busy("cpu", Needs(), None), SKIPPED)
    judged(doctor.check_busy("cuda", Needs(), smi.ToolMissing(["nvidia-smi"])), SKIPPED)


# --- memory -------------------------------------------------------------------------------


def test_free_memory_per_device_is_ok_when_mostly_free() -> None:
    judged(doctor.check_memory("cuda", Needs(), vendor(4), facts()), OK, "0-3: 79.6 of 79.6 GiB")


def test_a_device_with_little_free_memory_is_a_problem() -> None:
    full = [device(0), device(1, used=70000.0)]
    check = doctor.check_memory("cuda", Needs(), vendor(devices=full), facts())
    judged(check, PROBLEM, "1: 11.3 of 79.6 GiB", "under 50% free on 1")


def test_memory_from_the_framework_where_the_tool_has_none() -> None:
    check = doctor.check_memory(
        "cuda", Needs(), smi.ToolMissing(["nvidia-smi"]), facts(memory={"0": (1000.0, 81559.0)})
    )
    judged(check, PROBLEM, "free (the framework): 0: 1.0 of 79.6 GiB")


def test_memory_is_skipped_where_nothing_reports_it() -> None:
    judged(doctor.check_memory("cuda", Needs(), smi.ToolMissing(["x"]), facts()), SKIPPED)
    judged(doctor.check_memory("cpu", Needs(), None, facts()), SKIPPED)


# --- bf16 ---------------------------------------------------------------------------------


def test_bf16_ok_where_the_framework_says_so() -> None:
    judged(doctor.check_bf16("cuda", Needs(), vendor(), facts()), OK, "is_bf16_supported")


def test_no_bf16_is_a_problem_for_runs_in_bf16() -> None:
    v100 = facts(bf16=False, bf16_basis="compute capability 0-1: 7.0")
    judged(doctor.check_bf16("cuda", Needs(), vendor(), v100), PROBLEM, "7.0", "fp16")


def test_without_the_framework_the_compute_capability_decides() -> None:
    old = vendor(devices=[device(0, cap="7.0"), device(1, cap="8.0")])
    check = doctor.check_bf16("cuda", Needs(precision="bf16"), old, "cannot import pytorch")
    judged(check, PROBLEM, "0: 7.0; 1: 8.0")


def test_bf16_is_skipped_when_no_run_trains_in_it() -> None:
    check = doctor.check_bf16("cuda", Needs(precision="fp32"), vendor(), facts(bf16=False))
    judged(check, SKIPPED, "no run trains in bf16", "not supported")


def test_bf16_on_gaudi_and_on_rocm_by_gfx_target() -> None:
    judged(doctor.check_bf16("gaudi", Needs(), None, "no habana"), OK, "every Gaudi")
    mi50 = vendor(devices=[device(0, arch="gfx906")])
    judged(doctor.check_bf16("rocm", Needs(), mi50, facts(bf16=None)), PROBLEM, "gfx906")
    mi300 = vendor(devices=[device(0, arch="gfx942")])
    judged(doctor.check_bf16("rocm", Needs(), mi300, facts(bf16=None)), OK, "gfx942")


def test_bf16_is_skipped_on_the_cpu() -> None:
    judged(doctor.check_bf16("cpu", Needs(), None, facts()), SKIPPED, "fp32")


# --- collective ---------------------------------------------------------------------------


def test_collective_is_skipped_for_one_process() -> None:
    judged(doctor.check_collective("cuda", Needs(world_size=1), facts()), SKIPPED, "one process")


def test_collective_ok_names_the_library() -> None:
    check = doctor.check_collective("cuda", Needs(devices=8, world_size=8), facts())
    judged(check, OK, "NCCL", "2.21.5")


def test_a_missing_collective_backend_is_a_problem() -> None:
    none = facts(
        collective=False, collective_basis="torch.distributed.is_nccl_available() is False"
    )
    judged(doctor.check_collective("cuda", Needs(world_size=2), none), PROBLEM, "False", "NCCL")


def test_collective_is_skipped_where_the_framework_cannot_tell() -> None:
    cpu_build = facts(built_for_backend=False)
    judged(doctor.check_collective("cuda", Needs(world_size=2), cpu_build), SKIPPED, "framework")
    judged(doctor.check_collective("cpu", Needs(world_size=2), facts()), SKIPPED, "gloo")


# --- container ----------------------------------------------------------------------------


def _dev(tmp_path: Path, *nodes: str) -> Path:
    dev = tmp_path / "dev"
    for node in nodes:
        (dev / node).parent.mkdir(parents=True, exist_ok=True)
        (dev / node).touch()
    return dev


def test_container_is_skipped_outside_one(tmp_path: Path) -> None:
    judged(doctor.check_container("cuda", ("", ""), _dev(tmp_path)), SKIPPED, "not in a container")


@pytest.mark.parametrize(
    ("backend", "nodes"),
    [
        ("cuda", ["nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm"]),
        ("rocm", ["kfd", "dri/renderD128", "dri/card0"]),
        ("gaudi", ["accel/accel0", "accel/accel_controlD0"]),
        ("gaudi", ["hl0"]),
    ],
)
def test_device_nodes_that_reached_the_container_are_ok(
    tmp_path: Path, backend: str, nodes: list[str]
) -> None:
    where = ("docker", "localhost/accelpipe/x:1")
    check = doctor.check_container(backend, where, _dev(tmp_path, *nodes, "null"))
    judged(check, OK, "localhost/accelpipe/x:1")
    assert "/dev/null" not in check.found


@pytest.mark.parametrize(
    ("backend", "runtime", "nodes", "missing", "fix"),
    [
        ("cuda", "docker", ["null"], "/dev/nvidiactl, /dev/nvidia<N>", "NVIDIA Container Toolkit"),
        ("cuda", "apptainer", ["nvidiactl"], "/dev/nvidia<N>", "--nv"),
        ("rocm", "docker", ["dri/renderD128"], "/dev/kfd", "/dev/kfd"),
        ("rocm", "apptainer", ["null"], "/dev/kfd, /dev/dri/renderD<N>", "--rocm"),
        ("gaudi", "docker", ["null"], "/dev/accel/accel<N> or /dev/hl<N>", "--runtime=habana"),
        ("gaudi", "container", ["null"], "/dev/accel", "docker run --runtime=habana"),
    ],
)
def test_device_nodes_missing_in_the_container_are_a_problem(
    tmp_path: Path, backend: str, runtime: str, nodes: list[str], missing: str, fix: str
) -> None:
    check = doctor.check_container(backend, (runtime, "img"), _dev(tmp_path, *nodes))
    judged(check, PROBLEM, f"missing {missing}", fix)


def test_where_the_stage_runs(tmp_path: Path) -> None:
    assert doctor.container({"ACCELPIPE_IMAGE": "r/accelpipe/cuda-pytorch:ab"}, tmp_path) == (
        "docker",
        "r/accelpipe/cuda-pytorch:ab",
    )
    assert doctor.container({"APPTAINER_NAME": "cuda.sif"}, tmp_path) == ("apptainer", "cuda.sif")
    assert doctor.container({}, tmp_path) == ("", "")
    (tmp_path / ".dockerenv").touch()
    assert doctor.container({}, tmp_path) == ("container", "")


# --- the report ---------------------------------------------------------------------------


def test_the_report_prints_a_line_per_check_and_names_the_problems() -> None:
    report = doctor.diagnose(
        "cuda",
        "pytorch",
        Needs(devices=8, world_size=8),
        vendor(2),
        facts(2, collective=False),
        host="node7",
    )
    lines = report.lines()
    assert lines[0].startswith("accelpipe doctor: cuda / pytorch on node7, not in a container")
    assert [line.split()[1] for line in lines[1:-1]] == list(doctor.CHECKS)
    assert [c.name for c in report.problems] == ["devices", "collective"]
    assert lines[-1] == "2 problems: devices, collective"
    assert all(" | fix: " in line for line in lines[1:-1] if line.startswith("problem"))
    data = report.as_dict()
    assert {"backend", "framework", "host", "time", "image", "checks", "system"} <= set(data)
    assert data["checks"][0] == {
        "name": "driver",
        "status": "ok",
        "found": report.checks[0].found,
        "fix": None,
    }
    assert data["problems"] == ["devices", "collective"] and data["host"] == "node7"
    assert data["system"] == {
        "driver": "nvidia-smi 550.54.15",
        "device_count": 2,
        "devices": [H100, H100],
        "framework_build": "torch 2.6.0+cu124, built with CUDA 12.4",
    }
    json.dumps(data)  # JSON as it is


def test_the_doctor_over_stand_in_tools_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """doctor.run asks the tool on PATH, then the framework, and looks at /dev of `root`."""
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", path_without_vendor_tools(bin_dir))
    install_nvidia_smi(bin_dir, [gpu_row(0), gpu_row(1)], [app_row(1, 999_999_999)])
    root = tmp_path / "root"
    _dev(root, "nvidiactl", "nvidia0", "nvidia1")
    env = {"ACCELPIPE_IMAGE": "localhost/accelpipe/cuda-pytorch:0123456789ab"}
    report = doctor.run(
        "cuda", "pytorch", Needs(devices=2), lambda backend: facts(2), environ=env, root=root
    )
    status = {c.name: c.status for c in report.checks}
    assert status == {
        "driver": OK,
        "framework": OK,
        "devices": OK,
        "busy": PROBLEM,  # the stand-in process on GPU 1 has no owner in /proc
        "memory": OK,
        "bf16": OK,
        "collective": SKIPPED,
        "container": OK,
    }
    assert report.image == "localhost/accelpipe/cuda-pytorch:0123456789ab"


def test_the_cpu_doctor_asks_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to run
    report = doctor.run(
        "cpu", "pytorch", Needs(), lambda backend: facts(), environ={}, root=tmp_path
    )
    assert not report.problems
    assert {c.status for c in report.checks if c.name != "framework"} == {SKIPPED}
    assert report.system["driver"] is None
