"""Stand-ins for the vendor tools `accelpipe doctor` asks (accelpipe.devices.smi): scripts
for PATH printing what nvidia-smi, rocm-smi and amd-smi print for the queries it makes (hl-smi
is fake_power's `install_hl_smi`: it prints its CSV whatever the query), and a
`habana_frameworks` package for sys.path that registers a fake `torch.hpu`.

Each tool reads its answers from files beside it (`<tool>.<what>`), so a test can change them
between runs; `fail` makes it print a message on stderr and exit 9, as a tool without its
driver does.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

H100 = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"


VENDOR_TOOLS = frozenset({"nvidia-smi", "rocm-smi", "amd-smi", "hl-smi"})


def path_without_vendor_tools(bin_dir: Path) -> str:
    """A PATH of `bin_dir`, then the system's programs less the vendors' tools: on a GPU node
    /usr/bin holds the real nvidia-smi, which a test of a missing tool must not find."""
    system = bin_dir.parent / f"{bin_dir.name}-system"
    system.mkdir(exist_ok=True)
    for folder in ("/usr/bin", "/bin"):
        for program in Path(folder).iterdir():
            link = system / program.name
            if program.name not in VENDOR_TOOLS and not link.is_symlink():
                link.symlink_to(program)
    return f"{bin_dir}{os.pathsep}{system}"


def _executable(path: Path, script: str) -> Path:
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _failing(message_file: Path, message: str | None) -> str:
    """Script lines that print `message` on stderr and exit 9 (none without a message)."""
    if message is None:
        return ""
    message_file.write_text(message + "\n")
    return f'cat "{message_file}" >&2; exit 9\n'


def gpu_row(
    index: int,
    name: str = H100,
    *,
    total: int = 81559,
    used: int = 3,
    cap: str = "9.0",
    driver: str = DRIVER,
) -> str:
    """One line of `nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,
    memory.used,memory.free,compute_cap --format=csv,noheader,nounits` (MiB)."""
    return f"{index}, {uuid(index)}, {name}, {driver}, {total}, {used}, {total - used}, {cap}"


def uuid(index: int) -> str:
    return f"GPU-5a3b1c2d-0000-0000-0000-00000000000{index}"


def app_row(index: int, pid: int, name: str = "python", used: int = 40960) -> str:
    """One line of `nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory`."""
    return f"{uuid(index)}, {pid}, {name}, {used}"


def install_nvidia_smi(
    bin_dir: Path,
    gpus: Sequence[str] = (),
    apps: Sequence[str] = (),
    *,
    fail: str | None = None,
    no_compute_cap: bool = False,
) -> Path:
    """An `nvidia-smi` answering the GPU and compute-apps queries (one line per row given);
    `no_compute_cap`: a driver before R510, which refuses the compute_cap field."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "nvidia-smi.gpus").write_text("".join(f"{row}\n" for row in gpus))
    (bin_dir / "nvidia-smi.apps").write_text("".join(f"{row}\n" for row in apps))
    refuse = (
        'case "$*" in *compute_cap*) '
        "echo 'Field \"compute_cap\" is not a valid field to query.'; exit 2;; esac\n"
        if no_compute_cap
        else ""
    )
    failing = _failing(bin_dir / "nvidia-smi.fail", fail)
    return _executable(
        bin_dir / "nvidia-smi",
        "#!/bin/sh\n"
        f'echo "$@" >> "{bin_dir}/nvidia-smi.args"\n'
        f"{failing}{refuse}"
        'case "$*" in\n'
        f'  *--query-gpu=*) cat "{bin_dir}/nvidia-smi.gpus";;\n'
        f'  *--query-compute-apps=*) cat "{bin_dir}/nvidia-smi.apps";;\n'
        "  *) echo 'usage: nvidia-smi'; exit 2;;\n"
        "esac\n",
    )


def rocm_smi_output(gpus: Sequence[tuple[str, str, int, int]], driver: str = "6.7.0") -> str:
    """What `rocm-smi --showdriverversion --showproductname --showmeminfo vram` prints for
    GPUs given as (series, gfx target, VRAM total bytes, VRAM used bytes)."""
    rule = "=" * 90
    lines = [rule, "ROCm System Management Interface".center(90, "="), rule]
    lines += ["Version of System Component".center(90, "="), f"Driver version: {driver}", rule]
    lines.append("Product Info".center(90, "="))
    for i, (series, gfx, _, _) in enumerate(gpus):
        lines += [
            f"GPU[{i}]\t\t: Card Series: \t\t{series}",
            f"GPU[{i}]\t\t: Card Model: \t\t0x74a1",
            f"GPU[{i}]\t\t: Card Vendor: \t\tAdvanced Micro Devices, Inc. [AMD/ATI]",
            f"GPU[{i}]\t\t: GFX Version: \t\t{gfx}",
        ]
    lines += [rule, "Memory Usage (Bytes)".center(90, "=")]
    for i, (_, _, total, used) in enumerate(gpus):
        lines += [
            f"GPU[{i}]\t\t: VRAM Total Memory (B): {total}",
            f"GPU[{i}]\t\t: VRAM Total Used Memory (B): {used}",
        ]
    lines += [rule, "End of ROCm SMI Log".center(90, "="), rule]
    return "\n".join(lines) + "\n"


def install_rocm_smi(bin_dir: Path, output: str, *, fail: str | None = None) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "rocm-smi.out").write_text(output)
    failing = _failing(bin_dir / "rocm-smi.fail", fail)
    return _executable(bin_dir / "rocm-smi", f'#!/bin/sh\n{failing}cat "{bin_dir}/rocm-smi.out"\n')


def amd_smi_static(gpus: Sequence[tuple[str, str, str]], driver: str = "6.7.0") -> str:
    """`amd-smi static` for GPUs given as (market name, gfx target, VRAM size)."""
    lines = []
    for i, (name, gfx, size) in enumerate(gpus):
        lines += [
            f"GPU: {i}",
            "    ASIC:",
            f"        MARKET_NAME: {name}",
            "        VENDOR_ID: 0x1002",
            f"        TARGET_GRAPHICS_VERSION: {gfx}",
            "    DRIVER:",
            "        NAME: amdgpu",
            f"        VERSION: {driver}",
            "    VRAM:",
            "        TYPE: HBM",
            f"        SIZE: {size}",
            "",
        ]
    return "\n".join(lines)


def amd_smi_memory(usage: Sequence[tuple[str, str, str]]) -> str:
    """`amd-smi metric --mem-usage` for GPUs given as (total, used, free) with units."""
    lines = []
    for i, (total, used, free) in enumerate(usage):
        lines += [
            f"GPU: {i}",
            "    MEM_USAGE:",
            f"        TOTAL_VRAM: {total}",
            f"        USED_VRAM: {used}",
            f"        FREE_VRAM: {free}",
            "",
        ]
    return "\n".join(lines)


def install_amd_smi(bin_dir: Path, static: str, memory: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "amd-smi.static").write_text(static)
    (bin_dir / "amd-smi.memory").write_text(memory)
    return _executable(
        bin_dir / "amd-smi",
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  static) cat "{bin_dir}/amd-smi.static";;\n'
        f'  metric) cat "{bin_dir}/amd-smi.memory";;\n'
        "  *) echo 'usage: amd-smi'; exit 2;;\n"
        "esac\n",
    )


def hl_smi_row(module: int, *, used: int = 768, total: int = 98304, name: str = "HL-225") -> str:
    """One line of `hl-smi -Q module_id,name,driver_version,memory.total,memory.used,
    memory.free -f csv,noheader`."""
    return f"{module}, {name}, 1.21.0-fw-53.1.1, {total} MiB, {used} MiB, {total - used} MiB"


def write_habana(root: Path, *, hccl: bool = True, devices: int = 8) -> Path:
    """A `habana_frameworks` package under `root` (put it on sys.path): importing
    habana_frameworks.torch registers a torch.hpu with `devices` GAUDI2 cards, as Habana's
    does; habana_frameworks.tensorflow has load_habana_module, HPUStrategy and the card type.
    `hccl=False` leaves out both collective modules."""
    package = root / "habana_frameworks"
    files = {
        "__init__.py": "",
        "torch/__init__.py": (
            "import types\n\nimport torch\n\n__version__ = '1.21.0'\n"
            "torch.hpu = types.SimpleNamespace(\n"
            "    is_available=lambda: True,\n"
            f"    device_count=lambda: {devices},\n"
            "    get_device_name=lambda *index: 'GAUDI2',\n"
            ")\n"
        ),
        "torch/core/__init__.py": "def mark_step():\n    pass\n",
        "torch/distributed/__init__.py": "",
        "tensorflow/__init__.py": (
            "LOADED = []\n\n\ndef load_habana_module():\n    LOADED.append(1)\n"
        ),
        "tensorflow/habana_device.py": "def get_type():\n    return 'GAUDI2 (fake)'\n",
    }
    if hccl:
        files["torch/distributed/hccl.py"] = ""
        files["tensorflow/distribute.py"] = "class HPUStrategy:\n    pass\n"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def fake_gpu_torch(
    monkeypatch: Any,
    *,
    count: int = 2,
    available: bool = True,
    capability: tuple[int, int] = (9, 0),
    nccl: bool = True,
    hip: str | None = None,
) -> None:
    """torch as a CUDA build (or, with `hip`, a ROCm one) that sees `count` H100s (80 GiB,
    70 free), with NCCL 2.21.5 unless `nccl` is False."""
    import torch

    if hip:
        monkeypatch.setattr(torch.version, "hip", hip, raising=False)
        monkeypatch.setattr(torch.version, "cuda", None)
    else:
        monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: H100)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: capability)
    monkeypatch.setattr(
        torch.cuda,
        "is_bf16_supported",
        lambda including_emulation=True: capability >= (8, 0) or including_emulation,
    )
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (70 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: nccl)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
