"""One YAML reader for scenarios, playbooks and guard policies."""

from typing import Any

import yaml

# libyaml parses about ten times faster; the pure-Python loader is the fallback.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """Parse YAML safely; raises yaml.YAMLError with a problem_mark where the text is wrong."""
    return yaml.load(text, Loader=_LOADER)
