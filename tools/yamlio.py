"""Reading YAML data (scenarios, playbooks, guard policies) and saying clearly what is wrong."""

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

# libyaml parses about ten times faster; the pure-Python loader is the fallback.
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """Safe loading, except that a key given twice in one mapping is an error: PyYAML keeps
    the last one silently, so a second `state:` would quietly win over the first."""


def _no_duplicate_keys(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # keys merged in with `<<` may be overridden: that is what merging is for
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: the constructor below says so
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None,
                f"key {key!r} appears twice in one mapping (first on line {first.start_mark.line + 1})",
                key_node.start_mark)
        seen[key] = key_node
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)
_LOADER = _StrictLoader


def load_yaml(text: str) -> Any:
    """Parse YAML safely; raises yaml.YAMLError (describe it with describe_yaml_error)."""
    return yaml.load(text, Loader=_LOADER)


class FileError(Exception):
    """Something is wrong in one file: the message names the file, then the field or line."""

    def __init__(self, source: str | Path, message: str):
        self.source = self.path = str(source)
        self.message = message
        super().__init__(f"{source}: {message}")


class DataFileError(FileError):
    """A data file could not be read or parsed; the message says where (line and column)."""


def read_yaml_file(path: str | Path) -> Any:
    """Read and parse one YAML file; DataFileError names the file and what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataFileError(path, f"cannot read: {e}") from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as e:
        raise DataFileError(path, describe_yaml_error(e)) from None


def read_model_file(path: str | Path, model: type[M], error: type[DataFileError] = DataFileError) -> M:
    """One YAML data file validated by a strict pydantic model; `error` names the file and the field."""
    data = read_yaml_file(path)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise error(path, describe_validation_error(e, data)) from None


def describe_yaml_error(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return f"{where}not valid YAML ({getattr(err, 'problem', None) or err})"


def _field_path(loc: tuple[Any, ...], data: Any) -> str:
    """`cluster.jobs[0:48213].state`: list items carry their id or name where they have one."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node):
                node = node[item]
                ident = (node.get("id") or node.get("name")) if isinstance(node, dict) else None
                if ident is not None:
                    label = f"[{item}:{ident}]"
            parts.append(label)
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "(top level)"


def describe_validation_error(err: ValidationError, data: Any = None, unknown: str = "unknown field (a typo?)") -> str:
    """Every problem as `field.path: what is wrong`, joined with '; '."""
    lines = []
    for e in err.errors():
        loc = tuple(x for x in e["loc"] if not (isinstance(x, str) and x.startswith("function-")))
        msg = unknown if e["type"] == "extra_forbidden" else e["msg"]
        # pydantic's "Value error, " says nothing to a person; a message that already names
        # its own field (a nested loader's error) is not prefixed twice.
        msg = msg.removeprefix("Value error, ")
        path = _field_path(loc, data)
        lines.append(msg if msg.startswith(f"{path}") and path != "(top level)" else f"{path}: {msg}")
    return "; ".join(lines)
