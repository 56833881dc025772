"""Static checks of docker/images.yaml and every Dockerfile it names.

The vendor images cannot be pulled or built here, so each Dockerfile is parsed (a small
parser for the subset of the syntax we use) and checked for what the pipeline relies on:
a pinned base, our package and pinned requirements installed, the vendor's own torch left
alone, a non-root user, the vendor's environment knobs, no device visibility variables, no
secret-looking build arguments, and COPY sources that exist and pass .dockerignore.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from accelpipe.core import containers
from accelpipe.plan import images

REPO = Path(__file__).resolve().parents[2]
IMAGES_FILE = REPO / "docker" / "images.yaml"
BACKENDS = ("cpu", "cuda", "rocm", "gaudi")
IMAGE_KEYS = {"dockerfile", "backend", "framework", "base_image", "requirements"}
# Environment each image must set (the runtime never sets these); MIOpen serves both
# frameworks on ROCm, lazy mode is the PyTorch bridge's.
VENDOR_KNOBS: dict[str, dict[str, str]] = {
    "rocm-pytorch": {"MIOPEN_FIND_MODE": "1", "MIOPEN_FIND_ENFORCE": "3"},
    "rocm-tensorflow": {"MIOPEN_FIND_MODE": "1", "MIOPEN_FIND_ENFORCE": "3"},
    "gaudi-pytorch": {"PT_HPU_LAZY_MODE": "1"},
}
# Device visibility belongs to the runtime, which sets exactly one per vendor per lease.
VISIBILITY_VAR = re.compile(
    r"(CUDA|NVIDIA|HIP|ROCR)_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|HABANA_VISIBLE_\w+"
)
SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "KEY")
SHELL_OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}
# Directories COPY needs that git does not hold: accelpipe's image builder creates it (empty).
BUILD_TIME_DIRS = ("docker/wheelhouse",)
INSTRUCTIONS = {
    "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK",
    "LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR",
}  # fmt: skip


# --- Dockerfile parser -------------------------------------------------------------------


class DockerfileError(ValueError):
    """The text is not a Dockerfile this parser understands."""


@dataclass(frozen=True)
class Instruction:
    """One instruction: its first physical line, upper-case name and joined arguments."""

    line: int
    name: str
    args: str


@dataclass
class Stage:
    """A build stage: the FROM reference (unexpanded), its alias and its instructions."""

    base: str
    alias: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def named(self, name: str) -> list[Instruction]:
        return [i for i in self.instructions if i.name == name]


@dataclass
class Dockerfile:
    """Global ARGs (those before the first FROM) and the stages in order."""

    global_args: dict[str, str | None]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations and drop comment and blank lines, as Docker does."""
    lines: list[tuple[int, str]] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continuation
        if not parts:
            start = number
        body = raw.rstrip()
        if body.endswith("\\"):
            parts.append(body[:-1])
            continue
        parts.append(body)
        lines.append((start, "".join(parts).strip()))
        parts = []
    if parts:
        raise DockerfileError(f"line {start}: line continuation runs past the end of the file")
    return lines


def parse_instruction(number: int, line: str) -> Instruction:
    match = re.match(r"(\S+)\s*(.*)", line, re.DOTALL)
    assert match is not None
    name = match[1].upper()
    if name not in INSTRUCTIONS:
        raise DockerfileError(f"line {number}: unknown instruction {match[1]!r}")
    return Instruction(number, name, match[2].strip())


def parse_from(inst: Instruction) -> tuple[str, str | None]:
    """`FROM [--platform=...] image [AS name]` -> (image, alias)."""
    words = [w for w in inst.args.split() if not w.startswith("--")]
    if len(words) == 1:
        return words[0], None
    if len(words) == 3 and words[1].lower() == "as":
        return words[0], words[2]
    raise DockerfileError(f"line {inst.line}: cannot read FROM {inst.args!r}")


def parse_pairs(inst: Instruction) -> list[tuple[str, str | None]]:
    """ARG `NAME[=default]...` and ENV `KEY=value...` (or legacy `ENV KEY value`)."""
    words = shlex.split(inst.args)
    if inst.name == "ENV" and words and "=" not in words[0]:
        key, _, value = inst.args.partition(" ")
        return [(key, value.strip())]
    pairs: list[tuple[str, str | None]] = []
    for word in words:
        key, eq, value = word.partition("=")
        if inst.name == "ENV" and not eq:
            raise DockerfileError(f"line {inst.line}: ENV {word!r} has no value")
        pairs.append((key, value if eq else None))
    return pairs


def parse_dockerfile(text: str) -> Dockerfile:
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for number, line in logical_lines(text):
        inst = parse_instruction(number, line)
        if inst.name == "FROM":
            stages.append(Stage(*parse_from(inst)))
        elif stages:
            stages[-1].instructions.append(inst)
        elif inst.name == "ARG":
            global_args.update(parse_pairs(inst))
        else:
            raise DockerfileError(f"line {number}: {inst.name} before the first FROM")
    if not stages:
        raise DockerfileError("no FROM instruction")
    return Dockerfile(global_args, stages)


_VARIABLE = re.compile(r"\$(?:\{(?P<braced>\w+)(?::-(?P<default>[^}]*))?\}|(?P<bare>\w+))")


def expand(text: str, variables: dict[str, str | None]) -> str:
    """Substitute `$VAR`, `${VAR}` and `${VAR:-default}`; unknown variables become ''."""

    def value(match: re.Match[str]) -> str:
        found = variables.get(match["braced"] or match["bare"])
        return found or match["default"] or ""

    return _VARIABLE.sub(value, text)


def stage_variables(df: Dockerfile, stage: Stage) -> dict[str, str | None]:
    """ARG and ENV values a stage's instructions see (a bare ARG takes the global default)."""
    variables: dict[str, str | None] = {}
    for inst in stage.instructions:
        if inst.name not in ("ARG", "ENV"):
            continue
        for key, value in parse_pairs(inst):
            if inst.name == "ARG" and value is None:
                value = df.global_args.get(key)
            variables[key] = expand(value, variables) if value is not None else None
    return variables


def stage_env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for inst in stage.named("ENV"):
        env.update((k, v or "") for k, v in parse_pairs(inst))
    return env


@dataclass(frozen=True)
class Copy:
    """A COPY: expanded sources, destination and the stage it copies from (None: context)."""

    sources: tuple[str, ...]
    dest: str
    from_stage: str | None


def parse_copy(inst: Instruction, variables: dict[str, str | None]) -> Copy:
    rest = inst.args
    flags: dict[str, str] = {}
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        name, _, value = flag[2:].partition("=")
        flags[name] = value
        rest = rest.lstrip()
    paths = json.loads(rest) if rest.startswith("[") else rest.split()
    paths = [expand(p, variables) for p in paths]
    if len(paths) < 2:
        raise DockerfileError(f"line {inst.line}: COPY needs a source and a destination")
    return Copy(tuple(paths[:-1]), paths[-1], flags.get("from"))


def context_copies(df: Dockerfile, stage: Stage) -> list[Copy]:
    variables = stage_variables(df, stage)
    copies = [parse_copy(i, variables) for i in stage.named("COPY")]
    return [c for c in copies if c.from_stage is None]


def copied_paths(copy: Copy) -> dict[PurePosixPath, str]:
    """Image path -> repository path; a directory's contents land in the destination."""
    mapped: dict[PurePosixPath, str] = {}
    for source in copy.sources:
        repo_path = source.strip("/")
        is_dir = source.endswith("/") or (REPO / repo_path).is_dir()
        into_dir = copy.dest.endswith("/") or len(copy.sources) > 1
        target = PurePosixPath(copy.dest)
        if into_dir and not is_dir:
            target = target / PurePosixPath(repo_path).name
        mapped[target] = repo_path
    return mapped


def run_commands(stage: Stage) -> list[str]:
    """Shell-form RUN commands (leading --mount/--network flags dropped)."""
    commands = []
    for inst in stage.named("RUN"):
        words = inst.args.split(" ")
        while words and words[0].startswith("--"):
            words.pop(0)
        command = " ".join(words).strip()
        if command.startswith("["):
            command = shlex.join(json.loads(command))
        commands.append(command)
    return commands


def pip_installs(command: str, verb: str = "install") -> list[list[str]]:
    """The arguments after `pip <verb>` (install, wheel) of every pip command in a shell command."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    for token in lexer:
        if token in SHELL_OPERATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    found = []
    for words in segments:
        for i, word in enumerate(words[:-1]):
            if re.fullmatch(r"(.*/)?pip3?", word) and words[i + 1] == verb:
                found.append(words[i + 2 :])
    return found


def stage_pip_installs(df: Dockerfile, stage: Stage) -> list[list[str]]:
    variables = stage_variables(df, stage)
    return [args for c in run_commands(stage) for args in pip_installs(expand(c, variables))]


def requirement_args(args: list[str]) -> list[str]:
    """The files given to `-r` / `--requirement` in one pip install."""
    files = []
    for i, arg in enumerate(args):
        if arg in ("-r", "--requirement") and i + 1 < len(args):
            files.append(args[i + 1])
        elif arg.startswith("--requirement="):
            files.append(arg.partition("=")[2])
        elif arg.startswith("-r") and len(arg) > 2:
            files.append(arg[2:])
    return files


def installed_requirement_files(df: Dockerfile) -> set[str]:
    """Repository paths of the requirement files some stage installs with pip -r."""
    installed: set[str] = set()
    for stage in df.stages:
        in_image: dict[PurePosixPath, str] = {}
        for copy in context_copies(df, stage):
            in_image.update(copied_paths(copy))
        for args in stage_pip_installs(df, stage):
            for name in requirement_args(args):
                repo_path = in_image.get(PurePosixPath(name))
                if repo_path is not None:
                    installed |= with_includes(repo_path)
    return installed


def with_includes(repo_path: str) -> set[str]:
    """A requirements file and the files it pulls in with -r (relative to itself)."""
    files = {repo_path}
    here = posixpath.dirname(repo_path)
    for line in (REPO / repo_path).read_text().splitlines():
        for name in requirement_args(line.split("#", 1)[0].split()):
            files |= with_includes(posixpath.normpath(posixpath.join(here, name)))
    return files


def requirement_names(repo_path: str) -> set[str]:
    """Normalised project names required by a file (options and includes skipped)."""
    names = set()
    for line in (REPO / repo_path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if match and not line.startswith("-"):
            names.add(re.sub(r"[-_.]+", "-", match[0]).lower())
    return names


# --- .dockerignore -----------------------------------------------------------------------


@dataclass(frozen=True)
class IgnoreRule:
    """One .dockerignore line: a compiled pattern and whether it re-includes (`!`)."""

    pattern: re.Pattern[str]
    negated: bool


def glob_to_regex(glob: str) -> re.Pattern[str]:
    """Docker's pattern syntax: `*` and `?` stay within a path element, `**` spans them."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        char = glob[i]
        end = glob.find("]", i + 1) if char == "[" else -1
        if end > 0:
            out.append(glob[i : end + 1])
            i = end + 1
            continue
        out.append({"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char)))
        i += 1
    return re.compile("".join(out))


def parse_dockerignore(text: str) -> list[IgnoreRule]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = posixpath.normpath(line.lstrip("!").strip().strip("/"))
        rules.append(IgnoreRule(glob_to_regex(pattern), negated))
    return rules


def is_excluded(path: str, rules: list[IgnoreRule]) -> bool:
    """The last rule matching the path or one of its parent directories decides."""
    parts = PurePosixPath(path.strip("/")).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for rule in rules:
        if any(rule.pattern.fullmatch(c) for c in candidates):
            excluded = not rule.negated
    return excluded


# --- images.yaml -------------------------------------------------------------------------

_IMAGE_REF = re.compile(
    r"(?P<host>[a-z0-9.-]+(?::\d+)?)/(?P<path>[a-z0-9._-]+(?:/[a-z0-9._-]+)*)"
    r":(?P<tag>\w[\w.-]{0,127})"
)


def parse_image_ref(ref: str) -> dict[str, str] | None:
    """`host/path:tag` with a registry host (has a dot or port, or is localhost)."""
    match = _IMAGE_REF.fullmatch(ref)
    if match is None:
        return None
    host = match["host"]
    if "." not in host and ":" not in host and host != "localhost":
        return None
    return match.groupdict()


def load_images() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(IMAGES_FILE.read_text())["images"]


IMAGES = load_images()


@cache
def dockerfile(name: str) -> Dockerfile:
    return parse_dockerfile((REPO / IMAGES[name]["dockerfile"]).read_text())


@cache
def ignore_rules() -> list[IgnoreRule]:
    return parse_dockerignore((REPO / ".dockerignore").read_text())


per_image = pytest.mark.parametrize("name", sorted(IMAGES))


# --- parser and matcher unit tests ----------------------------------------------------------

SAMPLE = """\
# syntax=docker/dockerfile:1
ARG BASE=docker.io/library/debian:12.9
ARG TAGLESS
from ${BASE} AS build
ARG PIP_EXTRA_ARGS=""
ENV A=1 \\
    # a comment inside a continuation
    B="two words"
ENV LEGACY value with spaces
RUN --mount=type=cache,target=/root/.cache echo one \\

    && pip install -r /tmp/r.txt ${PIP_EXTRA_ARGS}
COPY ["requirements/core.txt", "/tmp/r.txt"]

FROM ${BASE}
COPY --from=build /opt /opt
USER 1000:1000
"""


def test_parser_reads_global_args_stages_and_continuations() -> None:
    df = parse_dockerfile(SAMPLE)
    assert df.global_args == {"BASE": "docker.io/library/debian:12.9", "TAGLESS": None}
    assert [(s.base, s.alias) for s in df.stages] == [("${BASE}", "build"), ("${BASE}", None)]
    build = df.stages[0]
    assert stage_env(build) == {"A": "1", "B": "two words", "LEGACY": "value with spaces"}
    assert run_commands(build) == ["echo one     && pip install -r /tmp/r.txt ${PIP_EXTRA_ARGS}"]
    assert stage_pip_installs(df, build) == [["-r", "/tmp/r.txt"]]
    assert context_copies(df, build) == [Copy(("requirements/core.txt",), "/tmp/r.txt", None)]
    assert context_copies(df, df.final) == []
    assert df.final.named("USER")[0].args == "1000:1000"


@pytest.mark.parametrize(
    "text",
    ["RUN echo before from\nFROM x", "FROM a\nFROBNICATE x", "FROM a\nRUN x \\", "ARG A=1\n"],
)
def test_parser_rejects_what_docker_rejects(text: str) -> None:
    with pytest.raises(DockerfileError):
        parse_dockerfile(text)


def test_expand_handles_braces_defaults_and_unknown_names() -> None:
    variables = {"A": "1", "EMPTY": ""}
    assert expand("$A-${A}-${EMPTY:-d}-${MISSING:-m}-$MISSING.", variables) == "1-1-d-m-."


def test_copied_paths_follow_docker_semantics() -> None:
    assert copied_paths(Copy(("pyproject.toml", "README.md"), "/src/", None)) == {
        PurePosixPath("/src/pyproject.toml"): "pyproject.toml",
        PurePosixPath("/src/README.md"): "README.md",
    }
    assert copied_paths(Copy(("workflow/",), "/src/workflow/", None)) == {
        PurePosixPath("/src/workflow"): "workflow"
    }
    assert copied_paths(Copy(("requirements/core.txt",), "/tmp/r.txt", None)) == {
        PurePosixPath("/tmp/r.txt"): "requirements/core.txt"
    }


def test_dockerignore_matcher() -> None:
    rules = parse_dockerignore("# c\n*\n!keep/\n!top.txt\nkeep/**/*.tmp\n**/__pycache__\n")
    assert is_excluded("other.txt", rules) and is_excluded("docs/a.md", rules)
    assert not is_excluded("top.txt", rules) and not is_excluded("keep/a/b.py", rules)
    assert is_excluded("keep/a/b.tmp", rules) and is_excluded("keep/x.tmp", rules)
    assert is_excluded("keep/pkg/__pycache__/m.pyc", rules)
    assert not is_excluded("keep/pkg/__pycache__x", rules)


def test_image_reference_parser() -> None:
    assert parse_image_ref("docker.io/library/python:3.11")["tag"] == "3.11"
    assert parse_image_ref("localhost:5000/a/b:1")["host"] == "localhost:5000"
    for bad in ("python:3.11", "docker.io/library/python", "library/python:3.11"):
        assert parse_image_ref(bad) is None


def test_requirement_helpers_read_the_real_files() -> None:
    assert "numpy" in requirement_names("requirements/core.txt")
    assert with_includes("requirements/cpu.txt") == {
        "requirements/cpu.txt",
        "requirements/core.txt",
        "requirements/torch.txt",
        "requirements/torch-cpu.txt",
        "requirements/tensorflow.txt",
        "requirements/tensorflow-cpu.txt",
        "requirements/workflow.txt",
    }


# --- images.yaml ---------------------------------------------------------------------------


@per_image
def test_image_entry_is_complete_and_named_backend_framework(name: str) -> None:
    image = IMAGES[name]
    assert set(image) == IMAGE_KEYS
    assert image["backend"] in BACKENDS
    assert name == f"{image['backend']}-{image['framework']}"
    assert (REPO / image["dockerfile"]).is_file()


def test_every_dockerfile_is_listed() -> None:
    listed = {IMAGES[name]["dockerfile"] for name in IMAGES}
    on_disk = {p.relative_to(REPO).as_posix() for p in (REPO / "docker").glob("*.Dockerfile")}
    assert on_disk == listed


@per_image
def test_base_image_is_a_pinned_registry_reference(name: str) -> None:
    ref = parse_image_ref(IMAGES[name]["base_image"])
    assert ref is not None, "base_image must be host/path:tag"
    assert ref["tag"] != "latest"


# --- Dockerfiles ---------------------------------------------------------------------------


@per_image
def test_from_uses_the_base_image_argument(name: str) -> None:
    df = dockerfile(name)
    aliases = {s.alias for s in df.stages if s.alias}
    for stage in df.stages:
        assert stage.base in aliases or stage.base == "${BASE_IMAGE}"
    assert df.final.base == "${BASE_IMAGE}"
    assert df.global_args.get("BASE_IMAGE") == IMAGES[name]["base_image"]


@per_image
def test_package_is_copied_into_src_and_installed(name: str) -> None:
    df = dockerfile(name)
    copied: dict[PurePosixPath, str] = {}
    for stage in df.stages:
        for copy in context_copies(df, stage):
            copied.update(copied_paths(copy))
    assert copied.get(PurePosixPath("/src/pyproject.toml")) == "pyproject.toml"
    assert copied.get(PurePosixPath("/src/workflow")) == "workflow"
    installs = [args for s in df.stages for args in stage_pip_installs(df, s)]
    if any(arg.rstrip("/") == "/src" for args in installs for arg in args):
        return
    # or built into a wheel that the final stage installs (keeps the dependency layer cached)
    wheels = [args for s in df.stages for c in run_commands(s) for args in pip_installs(c, "wheel")]
    assert any(arg.rstrip("/") == "/src" for args in wheels for arg in args)
    final_installs = stage_pip_installs(df, df.stages[-1])
    assert any(arg.endswith(".whl") for args in final_installs for arg in args)


CORE_FILES = {
    "requirements/core.txt",
    "requirements/core-py310.txt",
    "requirements/core-tf215.txt",
}
FRAMEWORK_PACKAGES = {"pytorch": ("torch", "monai"), "tensorflow": ("tensorflow", "tf-keras")}


@per_image
def test_core_requirements_are_installed(name: str) -> None:
    assert CORE_FILES & installed_requirement_files(dockerfile(name))


@pytest.mark.parametrize("variant", ["requirements/core-py310.txt", "requirements/core-tf215.txt"])
def test_core_variants_pin_the_same_packages_as_core(variant: str) -> None:
    assert requirement_names(variant) == requirement_names("requirements/core.txt")


@per_image
def test_images_yaml_lists_the_requirement_files_the_image_installs(name: str) -> None:
    """The tag hashes the listed files: they must be exactly what the build installs."""
    assert installed_requirement_files(dockerfile(name)) == set(IMAGES[name]["requirements"])


@per_image
def test_an_image_installs_no_other_frameworks_packages(name: str) -> None:
    installed = set()
    for repo_path in installed_requirement_files(dockerfile(name)):
        installed |= requirement_names(repo_path)
    for framework, packages in FRAMEWORK_PACKAGES.items():
        if framework != IMAGES[name]["framework"]:
            assert not [n for n in installed for p in packages if n.startswith(p)]


@per_image
def test_torch_comes_from_the_vendor_or_the_pinned_cpu_wheel(name: str) -> None:
    if IMAGES[name]["framework"] != "pytorch":
        pytest.skip("not a PyTorch image")
    df = dockerfile(name)
    installed = installed_requirement_files(df)
    assert all("torch" not in requirement_names(core) for core in CORE_FILES)
    if IMAGES[name]["backend"] == "cpu":
        assert "requirements/torch-cpu.txt" in installed
        return
    for stage in df.stages:
        for args in stage_pip_installs(df, stage):
            assert "torch" not in " ".join(args).lower()
    for repo_path in installed:
        assert not {n for n in requirement_names(repo_path) if n.startswith("torch")}


@per_image
def test_tensorflow_comes_from_the_vendor_or_the_pinned_cpu_wheel(name: str) -> None:
    if IMAGES[name]["framework"] != "tensorflow":
        pytest.skip("not a TensorFlow image")
    df = dockerfile(name)
    installed = installed_requirement_files(df)
    pins = {n for f in installed for n in requirement_names(f)}
    if IMAGES[name]["backend"] == "cpu":
        assert "tensorflow-cpu" in pins and "tf-keras" in pins
    else:
        assert not [n for n in pins if n.startswith("tensorflow")]
    # tf-keras names the `tensorflow` package: installed without its dependencies
    keras_installs = [
        args
        for s in df.stages
        for args in stage_pip_installs(df, s)
        if any("tf-keras" in a for a in args)
    ]
    assert keras_installs and all("--no-deps" in args for args in keras_installs)


# The numpy each TensorFlow release accepts (its wheels' Requires-Dist). TF < 2.18 is built
# against numpy 1.x: under numpy 2 `import tensorflow` fails ("A module that was compiled using
# NumPy 1.x cannot be run in NumPy 2"), and pip only warns when an image's core pins put numpy 2
# over the vendor's TensorFlow. A TF image on a release missing here fails: add its range.
TF_NUMPY = {
    (2, 15): SpecifierSet(">=1.23.5,<2.0.0"),
    (2, 17): SpecifierSet(">=1.23.5,<2.0.0"),
    (2, 21): SpecifierSet(">=1.26.0"),
}
# The TensorFlow release a vendor tag names: tensorflow/tensorflow:2.21.0-gpu,
# rocm/tensorflow:rocm6.3-py3.10-tf2.17.0-dev, Habana's ...-tf-cpu-2.15.0:1.14.0-493.
TF_IN_TAG = re.compile(r"(?:tensorflow:|tf|tf-cpu-)(\d+)\.(\d+)\.\d+")
# Keras 2 of the vendor's own TensorFlow: TF_MINOR read from the image's TensorFlow in the RUN
# command that installs tf-keras==${TF_MINOR}.* (a shell variable lives for one RUN).
TF_MINOR_OF_THE_IMAGE = re.compile(
    r"TF_MINOR=\$\(\S+ -c \"import tensorflow as tf; [^\"]*tf\.__version__[^\"]*\"\)"
)
KERAS2_OF_THE_IMAGE = "tf-keras==${TF_MINOR}.*"


def release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def requirement_pins(repo_paths: list[str]) -> dict[str, str]:
    """Normalised name -> `==` version of the files and the files they include."""
    pins = {}
    for path in sorted({f for p in repo_paths for f in with_includes(p)}):
        for line in (REPO / path).read_text().splitlines():
            match = re.fullmatch(
                r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)", line.split("#")[0].strip()
            )
            if match:
                pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return pins


def image_tensorflow(image: dict[str, Any]) -> tuple[int, int]:
    """The TensorFlow release an image runs: its pinned wheel, else the one its base tag names."""
    pins = requirement_pins(image["requirements"])
    pinned = pins.get("tensorflow-cpu") or pins.get("tensorflow")
    if pinned:
        return release(pinned)
    named = {(int(a), int(b)) for a, b in TF_IN_TAG.findall(image["base_image"])}
    assert len(named) == 1, f"{image['base_image']} names no single TensorFlow release"
    return named.pop()


def installs_keras2_of_its_tensorflow(df: Dockerfile) -> bool:
    """A RUN reads the image's TF release and installs tf-keras of it (--no-deps)."""
    for stage in df.stages:
        for command in run_commands(stage):
            if not TF_MINOR_OF_THE_IMAGE.search(command):
                continue
            for args in pip_installs(command):
                if KERAS2_OF_THE_IMAGE in args and "--no-deps" in args:
                    return True
    return False


def tensorflow_image_problems(image: dict[str, Any], df: Dockerfile) -> list[str]:
    """What keeps an image's numpy or Keras 2 from working with its TensorFlow release."""
    tf_release = image_tensorflow(image)
    tf_name = "TensorFlow {}.{}".format(*tf_release)
    pins = requirement_pins(image["requirements"])
    problems = []
    numpy_range = TF_NUMPY.get(tf_release)
    if numpy_range is None:
        problems.append(f"{tf_name} has no numpy range in TF_NUMPY (its wheels' Requires-Dist)")
    elif "numpy" not in pins:
        problems.append("the image's requirements pin no numpy")
    elif Version(pins["numpy"]) not in numpy_range:
        problems.append(f"numpy {pins['numpy']} is outside {tf_name}'s numpy{numpy_range}")
    keras = pins.get("tf-keras")
    if keras is not None and release(keras) != tf_release:
        problems.append(f"tf-keras {keras} is not the Keras 2 of {tf_name}")
    if tf_release >= (2, 16) and keras is None and not installs_keras2_of_its_tensorflow(df):
        problems.append(
            f"{tf_name}'s tf.keras is Keras 3 and the image installs no tf-keras of its release"
        )
    return problems


@per_image
def test_a_tensorflow_images_numpy_and_keras_2_match_its_tensorflow(name: str) -> None:
    if IMAGES[name]["framework"] != "tensorflow":
        pytest.skip("not a TensorFlow image")
    assert tensorflow_image_problems(IMAGES[name], dockerfile(name)) == []


@pytest.mark.parametrize(
    ("name", "change", "problem"),
    [
        # rocm-tensorflow as it was: core-py310's numpy 2.2.6 over the vendor's TF 2.17
        (
            "rocm-tensorflow",
            {"requirements": ["requirements/core-py310.txt", "requirements/tensorflow.txt"]},
            r"numpy 2\.2\.6 is outside TensorFlow 2\.17's numpy<2\.0\.0",
        ),
        (
            "cuda-tensorflow",
            {"base_image": "docker.io/tensorflow/tensorflow:2.17.0-gpu"},
            r"numpy 2\.4\.6 is outside TensorFlow 2\.17",
        ),
        (
            "cpu-tensorflow",
            {
                "requirements": [
                    f.replace("tf-keras.txt", "tf-keras-217.txt")
                    for f in IMAGES["cpu-tensorflow"]["requirements"]
                ]
            },
            r"tf-keras 2\.17\.0 is not the Keras 2 of TensorFlow 2\.21",
        ),
        (
            "cuda-tensorflow",
            {"base_image": "docker.io/tensorflow/tensorflow:2.19.0-gpu"},
            r"TensorFlow 2\.19 has no numpy range",
        ),
        # a Dockerfile that adds no tf-keras, under a TF >= 2.16 base
        ("rocm-tensorflow", {"dockerfile_of": "rocm-pytorch"}, r"installs no tf-keras"),
    ],
)
def test_a_tensorflow_image_whose_numpy_or_keras_2_does_not_match_is_caught(
    name: str, change: dict[str, Any], problem: str
) -> None:
    image = {**IMAGES[name], **change}
    df = dockerfile(image.pop("dockerfile_of", name))
    assert [p for p in tensorflow_image_problems(image, df) if re.search(problem, p)]


@per_image
def test_final_stage_runs_as_a_non_root_user(name: str) -> None:
    df = dockerfile(name)
    users = df.final.named("USER")
    assert users, "the final stage sets no USER"
    user = expand(users[-1].args, stage_variables(df, df.final)).partition(":")[0]
    assert user and user not in ("root", "0")


@per_image
def test_no_secret_looking_build_arguments_or_environment(name: str) -> None:
    df = dockerfile(name)
    names = set(df.global_args)
    for stage in df.stages:
        for inst in stage.named("ARG") + stage.named("ENV"):
            names |= {key for key, _ in parse_pairs(inst)}
    assert not [n for n in names if any(w in n.upper() for w in SECRET_WORDS)]


@per_image
def test_vendor_knobs_are_set_and_device_visibility_is_not(name: str) -> None:
    df = dockerfile(name)
    env = stage_env(df.final)
    for key, value in VENDOR_KNOBS.get(name, {}).items():
        assert env.get(key) == value, key
    names = set(df.global_args)
    for stage in df.stages:
        names |= set(stage_env(stage)) | set(stage_variables(df, stage))
    assert not [n for n in names if VISIBILITY_VAR.fullmatch(n)]


@per_image
def test_copy_sources_exist_and_pass_dockerignore(name: str) -> None:
    df = dockerfile(name)
    for stage in df.stages:
        for copy in context_copies(df, stage):
            for source in copy.sources:
                path = source.strip("/")
                assert "$" not in path, f"unexpanded variable in COPY {source}"
                assert path in BUILD_TIME_DIRS or (REPO / path).exists(), source
                assert not is_excluded(path, ignore_rules()), f"{source} is in .dockerignore"


def test_package_sources_pass_dockerignore_but_caches_do_not() -> None:
    rules = ignore_rules()
    assert not is_excluded("workflow/accelpipe/cli.py", rules)
    assert not is_excluded("workflow/accelpipe/schemas/config.schema.yaml", rules)
    assert is_excluded("workflow/accelpipe/__pycache__/cli.cpython-311.pyc", rules)
    assert is_excluded("tests/docker/test_dockerfiles.py", rules)
    assert is_excluded(".venv/bin/python", rules)


class _ContextRecorder:
    """An engine without the image: `containers.build` builds it, and this notes which
    build-time directories the build context held when the engine was handed it."""

    def __init__(self) -> None:
        self.images = self.api = self
        self.context_dirs: list[str] | None = None

    def get(self, ref: str) -> object:
        from docker.errors import ImageNotFound

        if self.context_dirs is None:
            raise ImageNotFound(ref)
        return object()

    def build(self, path: str, **_: Any) -> list[dict[str, str]]:
        self.context_dirs = [d for d in BUILD_TIME_DIRS if (Path(path) / d).is_dir()]
        return []


def test_the_image_builder_makes_the_build_time_directories(tmp_path: Path) -> None:
    """A checkout lacks them (git holds none), and a COPY of a missing directory fails the
    build: accelpipe's builder makes them before the engine reads the context."""
    (tmp_path / "docker").mkdir()  # a checkout: the Dockerfiles' folder, no wheelhouse
    engine = _ContextRecorder()
    spec = images.spec_for("cpu", "pytorch")
    containers.build(spec, "localhost/accelpipe/test:1", engine, repo=tmp_path)
    assert engine.context_dirs == list(BUILD_TIME_DIRS)


@per_image
def test_run_commands_are_valid_sh(name: str) -> None:
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh to check RUN syntax with")
    for stage in dockerfile(name).stages:
        for command in run_commands(stage):
            result = subprocess.run([sh, "-n", "-c", command], capture_output=True, text=True)
            assert result.returncode == 0, f"{command}\n{result.stderr}"
