"""Where in a YAML text a field is: the line a person opens their editor at."""

from __future__ import annotations

from typing import Any

import yaml


def line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the value at `loc` (keys and list indexes), or of the deepest
    part of it that exists; None when the text does not parse."""
    try:
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            found = next(((k, v) for k, v in node.value if k.value == part), None)
            if found is None:
                break
            # A key's own line: for a list or mapping value that is where it starts being wrong.
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
