"""Every snakemake command the README, the docs (docs/*.md) and the config comments print runs
as printed: each is dry-run, word for word, in a workflow copy that has one finished run
(results/compare needs one). Templates with `<placeholders>` are not commands and are left
out."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Iterator

import pytest

from tests.workflow.project import REPO, Project

pytestmark = pytest.mark.e2e

SHELL_BLOCK = re.compile(r"```(?:sh|bash|shell|console)\n(.*?)```", re.S)
INLINE_CODE = re.compile(r"(?<!`)`(snakemake [^`]+)`(?!`)")
COMMENT_COMMAND = re.compile(r"^\s*#\s*(snakemake .+)$", re.M)
# plan.capacity's one line when data_root's disk cannot hold a full dataset
DISK_REFUSAL = re.compile(r"raw \w+: needs ~[\d.]+ [GT]B on .* but [\d.]+ [GMT]B is free")
# the copies the commands name by relative path, beside the workflow copy
RUN_FROM = (".test", "profiles")


def _shell_commands(block: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, quotes spanning lines kept."""
    commands, pending = [], ""
    for line in block.replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        commands.append(pending.removeprefix("$ "))
        pending = ""
    return commands


# The pages that print commands: the README and every page under docs/.
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def printed_commands() -> dict[str, str]:
    """`command: where` for every snakemake command the docs print."""
    found: dict[str, str] = {}
    for page in PAGES:
        text, name = page.read_text(), str(page.relative_to(REPO))
        for block in SHELL_BLOCK.findall(text):
            for command in _shell_commands(block):
                if command.lstrip().startswith("snakemake "):
                    found.setdefault(command, f"{name} (shell block)")
        for command in INLINE_CODE.findall(text):
            found.setdefault(command, f"{name} (inline)")
    configs = [REPO / "config.yaml", REPO / ".test/config.yaml"]
    configs += sorted((REPO / "profiles").glob("*/config.yaml"))
    for config in configs:
        for command in COMMENT_COMMAND.findall(config.read_text()):
            found.setdefault(command, str(config.relative_to(REPO)))
    return {c: where for c, where in found.items() if not re.search(r"<[^>]+>", c)}


COMMANDS = printed_commands()


def test_the_docs_print_the_commands_this_test_runs() -> None:
    """The extraction finds what a reader sees (a broken regex would pass every command)."""
    assert len(COMMANDS) >= 10
    assert any("--configfile .test/config.yaml" in c for c in COMMANDS)
    assert any("--profile profiles/slurm" in c for c in COMMANDS)
    assert any("results/compare" in c for c in COMMANDS)
    # the README's quick start, one command per workload, and commands from every docs page
    # that prints any (a page moved or renamed must not drop out silently)
    readme = {c for c, where in COMMANDS.items() if where.startswith("README.md")}
    for workload in ("unet2d/fold0", "swinunetr/default", "resnet50/fp32", "ssd/fp32"):
        assert any(f"results/{workload}" in c for c in readme), workload
    assert any("results/segmenter/fp32" in c for c in readme)
    pages = {where.split(" ", 1)[0] for where in COMMANDS.values()}
    for page in ("unet2d", "swinunetr", "resnet50", "ssd", "segmenter", "stages"):
        assert f"docs/{page}.md" in pages, page
    assert "docs/containers-and-clusters.md" in pages


@pytest.fixture(scope="module")
def readme_project(project: Project, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """The built workflow copy, with the folders commands name and an `apptainer` stand-in
    (Snakemake checks for the binary even in a dry run; none is installed here)."""
    for name in RUN_FROM:
        if not (project.root / name).exists():
            shutil.copytree(REPO / name, project.root / name)
    bin_dir = tmp_path_factory.mktemp("bin")
    fake = bin_dir / "apptainer"
    fake.write_text("#!/bin/sh\necho 'apptainer version 1.3.4'\n")
    fake.chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{path}"
    yield project
    os.environ["PATH"] = path


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=lambda c: c[:80])
def test_printed_snakemake_command_runs_as_printed(readme_project: Project, command: str) -> None:
    argv = shlex.split(command, comments=True)
    assert argv[0] == "snakemake"
    proc = readme_project.snakemake("--dry-run", *argv[1:], check=False)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and DISK_REFUSAL.search(output):
        # a real dataset's command planned up to its raw job, whose disk check (plan.capacity)
        # refuses on a machine with less free space than the full dataset needs: as printed
        return
    assert proc.returncode == 0, f"{COMMANDS[command]}: `{command}` fails:\n{output[-3000:]}"
