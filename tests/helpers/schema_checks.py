"""Checks on the config schema that only the tests make."""

from __future__ import annotations

from typing import Any

from accelpipe.config.schema_docs import Reference


def undescribed(schema: dict[str, Any]) -> list[str]:
    """Dotted paths of the keys (and of the values of maps of names) that have no description,
    beside them or on their `$ref`; keys inside `definitions` as `#/definitions/<name>.<key>`."""
    ref = Reference(schema)
    found: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        for key, sub in node.get("properties", {}).items():
            where = f"{path}.{key}" if path else key
            if not ref.description_of(sub):
                found.append(where)
            if "$ref" not in sub:
                walk(sub, where)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):  # the values of a map of names (runs, grid)
            if not ref.description_of(extra):
                found.append(f"{path}.<name>")
            if "$ref" not in extra:
                walk(extra, f"{path}.<name>")
        if isinstance(node.get("items"), dict) and "$ref" not in node["items"]:
            walk(node["items"], f"{path}.<items>")
        for word in ("oneOf", "anyOf"):
            for i, alt in enumerate(node.get(word, ())):
                if "$ref" not in alt:
                    walk(alt, f"{path}.<{word}[{i}]>")

    walk(schema, "")
    for name, node in ref.definitions.items():
        walk(node, f"#/definitions/{name}")
    return found
