"""Load and check the playbooks: every error names the file and the field."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from crashcart.playbooks._model import Label, Playbook
from crashcart.tools.yamlio import DataFileError, describe_validation_error, read_yaml_file

BUNDLED_DIR = Path(__file__).parent


class PlaybookError(Exception):
    pass


@dataclass(frozen=True)
class LabelEntry:
    name: str
    family: str
    label: Label
    patterns: tuple[re.Pattern[str] | None, ...] = field(default=())


@dataclass(frozen=True)
class KnowledgeBase:
    entries: dict[str, LabelEntry]

    def __getitem__(self, name: str) -> LabelEntry:
        return self.entries[name]

    def __iter__(self):
        return iter(self.entries.values())


def load_playbooks(directory: str | Path | None = None) -> KnowledgeBase:
    return _load(str(Path(directory or BUNDLED_DIR).resolve()))


@lru_cache(maxsize=8)
def _load(directory: str) -> KnowledgeBase:
    entries: dict[str, LabelEntry] = {}
    files = sorted(Path(directory).glob("*.yaml"))
    if not files:
        raise PlaybookError(f"{directory}: no playbook files (*.yaml)")
    for path in files:
        try:
            data = read_yaml_file(path)
            book = Playbook.model_validate(data)
        except DataFileError as e:
            raise PlaybookError(str(e)) from None
        except ValidationError as e:
            raise PlaybookError(f"{path}: {describe_validation_error(e, data)}") from None
        for name, label in book.labels.items():
            if name in entries:
                raise PlaybookError(f"{path}: label {name!r} is also in the {entries[name].family} playbook")
            patterns = tuple(re.compile(s.pattern, re.I | re.M) if s.pattern else None for s in label.signals)
            entries[name] = LabelEntry(name, book.family, label, patterns)
    _check_setting_names(entries)
    return KnowledgeBase(entries)


def _check_setting_names(entries: dict[str, LabelEntry]) -> None:
    """A remedy names a setting of the key table, never one of its synonyms: one table says which
    keys a job may use for it, so no remedy can forget the key this job reads."""
    from crashcart.agent.policies.config_keys import load_key_table

    table = load_key_table()
    for entry in entries.values():
        for key in (entry.label.remedy.changes, *([entry.label.one_node.remedy.changes] if entry.label.one_node else [])):
            for name in key:
                owner = table.setting_of(name)
                if name not in table.settings and owner:
                    raise PlaybookError(f"label {entry.name!r}: remedy change {name!r} is a key of the setting "
                                        f"{owner!r} in settings/config_keys.yaml; name the setting")
