"""Every placeholder a rule's `shell:` command fills in is shell-quoted (`{...:q}`), so a path
or config value with a space, a quote or `$(...)` reaches `accelpipe` as one argument and
never runs as shell code (issue 30, item 1). Read from the rule files' tokens, so a new rule
cannot regress without failing here."""

from __future__ import annotations

import ast
import io
import string
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKFLOW_FILES = sorted([REPO / "Snakefile", *(REPO / "rules").glob("*.smk")])
# tokens that may sit between `shell:` and its strings
_LAYOUT = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT}


def shell_commands(path: Path) -> list[tuple[int, str]]:
    """Each `shell:` directive's command in `path` (its adjacent string literals joined), with
    its line; a `shell(...)` call (a `run:` block) is refused, it would escape this check."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    commands = []
    for i, tok in enumerate(tokens[:-1]):
        if tok.type != tokenize.NAME or tok.string != "shell":
            continue
        following = tokens[i + 1].string
        assert following != "(", f"{path}:{tok.start[0]}: shell() call; use a shell: directive"
        if following != ":":
            continue
        parts = []
        for later in tokens[i + 2 :]:
            if later.type == tokenize.STRING:
                parts.append(ast.literal_eval(later.string))
            elif later.type not in _LAYOUT:
                break
        commands.append((tok.start[0], "".join(parts)))
    return commands


def unquoted_fields(command: str) -> list[str]:
    """The `{field}`s of a Snakemake shell command without the `:q` quoting format spec."""
    return [
        f"{{{field}{':' + spec if spec else ''}}}"
        for _, field, spec, _ in string.Formatter().parse(command)
        if field is not None and not (spec or "").endswith("q")
    ]


def test_every_workflow_file_is_read() -> None:
    commands = [c for path in WORKFLOW_FILES for c in shell_commands(path)]
    assert len(commands) >= 12  # every rule but `all` runs one
    assert all("accelpipe" in command for _, command in commands)


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_every_shell_placeholder_is_quoted(path: Path) -> None:
    unquoted = {
        f"{path.name}:{line}": fields
        for line, command in shell_commands(path)
        if (fields := unquoted_fields(command))
    }
    assert not unquoted, f"unquoted placeholders (add :q): {unquoted}"


def test_the_check_sees_an_unquoted_placeholder(tmp_path: Path) -> None:
    rule = tmp_path / "x.smk"
    rule.write_text(
        'rule x:\n    output:\n        "o",\n    shell:\n'
        '        "accelpipe --out {output:q}"\n        " --log {log} --n {{literal}}"\n'
    )
    assert shell_commands(rule) == [(4, "accelpipe --out {output:q} --log {log} --n {{literal}}")]
    assert unquoted_fields(shell_commands(rule)[0][1]) == ["{log}"]
