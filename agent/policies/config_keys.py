"""The job's own keys for a setting, and their units (playbooks/settings/config_keys.yaml).

A remedy says "halve the per-GPU batch" or "16 GiB of /dev/shm"; this module finds which
key the job's config uses for that setting and writes the value in that key's unit. Values
are computed in a canonical unit per kind (bytes for memory, seconds for durations).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from crashcart.playbooks._loader import BUNDLED_DIR
from crashcart.tools.yamlio import DataFileError, read_model_file

TABLE_PATH = BUNDLED_DIR / "settings" / "config_keys.yaml"

Kind = Literal["count", "flag", "text", "fraction", "memory", "duration", "mapping"]
Unit = Literal[
    "count", "flag", "text", "fraction",
    "bytes", "KiB", "MiB", "GiB", "KB", "MB", "GB", "quantity",
    "seconds", "minutes", "hours", "slurm_time", "mapping", "path_name",
]
MEMORY_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
DURATION_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600}
UNITS_OF_KIND: dict[str, set[str]] = {
    "count": {"count"}, "flag": {"flag"}, "text": {"text", "flag", "path_name"}, "fraction": {"fraction"},
    "memory": set(MEMORY_UNITS) | {"quantity"}, "duration": set(DURATION_UNITS) | {"slurm_time"},
    "mapping": {"mapping"},
}
DEFAULT_UNIT = {"count": "count", "flag": "flag", "text": "text", "fraction": "fraction",
                "memory": "bytes", "duration": "seconds", "mapping": "mapping"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# What a sibling of a key named by its shape must hold: `zero` absent, null or 0 (a Ray Data
# stage without `num_gpus` is a CPU stage); `declared` present, null included.
SiblingTest = Literal["zero", "declared"]


class Key(Strict):
    key: str
    """Dotted path into the job's config (`resources.limits.memory`, `env.NAME`). A `*` segment
    stands for any one name (a Ray Data stage: `*.concurrency`)."""
    siblings: dict[str, SiblingTest] = Field(default_factory=dict)
    """For a key named by its shape: what the other keys of its block must hold."""
    unit: Unit | None = None
    """How this key writes the value; the setting's kind decides when not given."""
    means: str | None = None
    """A flag that stands for one value of a text setting (DeepSpeed's `bf16.enabled`)."""
    values: dict[str, str] = Field(default_factory=dict)
    """This key's own spelling of canonical values (Lightning: bf16 -> "bf16-mixed")."""


class Setting(Strict):
    description: str
    kind: Kind
    keys: list[Key]
    add: str | None = None
    """The key to add when the job has none: only one the runtime reads by itself (an env var)."""

    @model_validator(mode="after")
    def _units_fit(self) -> Setting:
        for k in self.keys:
            segments = k.key.split(".")
            if any("*" in seg and seg != "*" for seg in segments) or segments[-1] == "*":
                raise ValueError(f"key {k.key!r}: `*` stands for one whole segment, and never the last")
            if k.siblings and "*" not in segments:
                raise ValueError(f"key {k.key!r}: `siblings` is for a key named by its shape (a `*` segment)")
        for k in self.keys:
            unit = k.unit or DEFAULT_UNIT[self.kind]
            if unit not in UNITS_OF_KIND[self.kind]:
                raise ValueError(f"key {k.key!r}: unit {unit!r} does not fit a {self.kind} setting")
            if k.means and unit != "flag":
                raise ValueError(f"key {k.key!r}: `means` is for flag keys")
        if self.add and self.add not in {k.key for k in self.keys}:
            raise ValueError(f"add {self.add!r} is not one of the setting's keys")
        return self


class EnvRule(Strict):
    """Where a job carries its environment variables: a key `env.NAME` (the table's or a
    playbook's literal one) means the variable NAME in whichever of these blocks the job has."""

    blocks: list[str]
    """The blocks jobs keep variables in, dotted (`env`, a Ray job's `runtime_env.env_vars`)."""
    add_to: dict[Literal["slurm", "kubernetes", "ray"], str]
    """The block a new variable goes to when the job has none, per backend (one of `blocks`)."""

    @model_validator(mode="after")
    def _known_blocks(self) -> EnvRule:
        for backend, block in self.add_to.items():
            if block not in self.blocks:
                raise ValueError(f"add_to.{backend}: {block!r} is not one of the env blocks {self.blocks}")
        return self


@dataclass(frozen=True)
class Found:
    """A table key as one job's config spells it."""

    path: str
    """Where the config keeps it, dotted: the key a change writes (`deepspeed.train_micro_batch_size_per_gpu`)."""
    value: Any
    key: Key
    """The table's key it answers to (its unit, its spelling of values)."""


class KeyTable(Strict):
    settings: dict[str, Setting]
    nesting_blocks: list[str] = Field(default_factory=list)
    """Blocks a framework nests its own settings in: a table key is found under any chain of them."""
    env: EnvRule | None = None
    bf16_gpu_models: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_setting_per_key(self) -> KeyTable:
        seen: dict[str, str] = {}
        for name, setting in self.settings.items():
            for k in setting.keys:
                if k.key in seen:
                    raise ValueError(f"key {k.key!r} is in both {seen[k.key]!r} and {name!r}")
                seen[k.key] = name
        return self

    def setting_of(self, key: str) -> str | None:
        """The setting a job key belongs to, if the table knows it."""
        for name, setting in self.settings.items():
            if any(k.key == key for k in setting.keys):
                return name
        return None

    def find(self, config: dict[str, Any], setting: str) -> list[Found]:
        """Every key of a setting the job's config has (null values included: a declared key is
        one the job reads), each once, in the table's order of keys."""
        found: dict[str, Found] = {}
        paths = config_paths(config)
        for key in self.settings[setting].keys:
            for f in self._locate(paths, key):
                found.setdefault(f.path, f)
        return list(found.values())

    def locate(self, config: dict[str, Any], key: Key | str) -> list[Found]:
        """Where the job's config has one key: at its own path, under any chain of nesting blocks,
        an `env.NAME` in any env block; the shortest path first."""
        return self._locate(config_paths(config), key if isinstance(key, Key) else Key(key=key))

    def value_of(self, config: dict[str, Any], setting: str) -> Any:
        """The first non-null value the job gives a setting."""
        return next((f.value for f in self.find(config, setting) if f.value is not None), None)

    def new_path(self, config: dict[str, Any], key: str, backend: str | None) -> str:
        """Where a key the job lacks goes: an env var into the env block the job already has,
        else into the one its backend reads (a Ray job's runtime_env.env_vars); any other key as is."""
        name = _env_name(key)
        if name is None or self.env is None:
            return key
        paths = config_paths(config)
        block = next((b for b in self.env.blocks if isinstance(paths.get(b), dict)), None)
        block = block or self.env.add_to.get(backend or "", "env")  # type: ignore[call-overload]
        return f"{block}.{name}"

    def answers(self, path: str, key: str) -> bool:
        """A config path is where some job could keep this table key (its siblings unchecked)."""
        return bool(self._pattern(key).fullmatch(path))

    def _locate(self, paths: dict[str, Any], key: Key | str) -> list[Found]:
        key = key if isinstance(key, Key) else Key(key=key)
        pattern = self._pattern(key.key)
        hits = sorted((p for p in paths if pattern.fullmatch(p)), key=lambda p: (p.count("."), len(p)))
        last = key.key.rsplit(".", 1)[-1]
        return [Found(p, paths[p], key) for p in hits
                if all(_sibling_holds(paths.get(p[: -len(last)] + name), test, p[: -len(last)] + name in paths)
                       for name, test in key.siblings.items())]

    def _pattern(self, key: str) -> re.Pattern[str]:
        return _key_pattern(key, tuple(self.nesting_blocks), tuple(self.env.blocks) if self.env else ())

    def supports_bf16(self, gpu_model: str | None) -> bool:
        if not gpu_model:
            return False
        return any(re.search(rf"(?<![\w-]){re.escape(m)}(?!\w)", gpu_model, re.I) for m in self.bf16_gpu_models)


def config_paths(config: dict[str, Any]) -> dict[str, Any]:
    """Every key of a config at any depth, by its dotted path; a key spelt flat
    (`"preprocess.concurrency": 384`) has the same path as the nested spelling."""
    return dict(_walk(config, ""))


def _walk(node: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for name, value in node.items():
        path = f"{prefix}{name}"
        yield path, value
        if isinstance(value, dict):
            yield from _walk(value, path + ".")


def _env_name(key: str) -> str | None:
    return key[4:] if key.startswith("env.") and len(key) > 4 else None


@lru_cache(maxsize=1024)
def _key_pattern(key: str, blocks: tuple[str, ...], env_blocks: tuple[str, ...]) -> re.Pattern[str]:
    name = _env_name(key)
    if name is not None and env_blocks:
        body = "(?:" + "|".join(re.escape(b) for b in env_blocks) + r")\." + re.escape(name)
    else:
        body = r"\.".join(r"[^.]+" if seg == "*" else re.escape(seg) for seg in key.split("."))
    nesting = "(?:(?:" + "|".join(re.escape(b) for b in blocks) + r")\.)*" if blocks else ""
    return re.compile(nesting + body)


def _sibling_holds(value: Any, test: str, declared: bool) -> bool:
    if test == "declared":
        return declared
    return value is None or value is False or (isinstance(value, (int, float)) and value == 0)


class KeyTableError(DataFileError):
    pass


@lru_cache(maxsize=4)
def load_key_table(path: str | None = None) -> KeyTable:
    return read_model_file(Path(path) if path else TABLE_PATH, KeyTable, KeyTableError)


# --- units ---------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?|[kmgtp]|[KMGTP]B|[KMGTP]iB)?\s*$")
_QUANTITY_FACTOR = {
    "": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
    # Docker's --shm-size and sbatch --mem read k/m/g as binary units.
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}


def parse_size(text: Any) -> float | None:
    """"16Gi", "512Mi", "16g", "31.5 GiB", "33554432kB" (the kernel's) as bytes."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip().replace(",", "")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KkMGTP]i?B?|[kmgtp]|B)?", s)
    if not m:
        return None
    suffix = m.group(2) or ""
    if suffix == "kB":  # the kernel's kB is KiB
        suffix = "KiB"
    if suffix == "B":
        suffix = ""
    factor = _QUANTITY_FACTOR.get(suffix) or _QUANTITY_FACTOR.get(suffix.upper())
    return float(m.group(1)) * factor if factor else None


def parse_duration(text: Any, unit: str) -> float | None:
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text) * (60 if unit == "slurm_time" else DURATION_UNITS.get(unit, 1))
    s = str(text).strip()
    if unit != "slurm_time":
        try:
            return float(s) * DURATION_UNITS.get(unit, 1)
        except ValueError:
            return None
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", s)
    if not m:
        return None
    days, a, b, c = (int(x) if x else None for x in m.groups())
    if b is None and days is None:
        return a * 60.0  # bare minutes
    if c is None:
        hours, minutes, seconds = (a, b or 0, 0) if days is not None else (0, a, b or 0)
    else:
        hours, minutes, seconds = a, b, c
    return (days or 0) * 86400.0 + hours * 3600 + minutes * 60 + seconds


def format_slurm_time(seconds: float) -> str:
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def to_canonical(value: Any, key: Key, kind: str) -> Any:
    """The key's value in the setting's canonical unit, or None when it is not one."""
    unit = key.unit or DEFAULT_UNIT[kind]
    if value is None:
        return None
    if key.means is not None:
        return key.means if value is True else None
    if kind == "memory":
        if unit == "quantity":
            return parse_size(value)
        number = _number(value)
        return None if number is None else number * MEMORY_UNITS[unit]
    if kind == "duration":
        return parse_duration(value, unit)
    if kind in {"count", "fraction"}:
        return _number(value)
    if kind == "flag":
        return value if isinstance(value, bool) else None
    if kind == "mapping":
        return value if isinstance(value, dict) else None
    reverse = {v: k for k, v in key.values.items()}
    return reverse.get(str(value), value)


def from_canonical(value: Any, key: Key, kind: str, like: Any, raising: bool) -> Any:
    """A canonical value written as this key writes it (its unit, its type, its spelling).
    `raising`: round memory up (a limit raised above a peak must stay above it)."""
    unit = key.unit or DEFAULT_UNIT[kind]
    if key.means is not None:
        return value == key.means
    if kind == "memory":
        if unit == "quantity":
            return _format_quantity(value, like, raising)
        amount = value / MEMORY_UNITS[unit]
        return _rounded(amount, like, raising)
    if kind == "duration":
        if unit == "slurm_time":
            return format_slurm_time(value) if not isinstance(like, (int, float)) else int(value // 60)
        return _rounded(value / DURATION_UNITS[unit], like, raising)
    if kind in {"count", "fraction"}:
        result = _rounded(value, like, raising=False)
        return str(result) if isinstance(like, str) else result
    if kind == "text":
        if unit == "path_name" and isinstance(value, str):
            # A key that names a checkpoint inside its save directory (DeepSpeed's load tag).
            return value.rstrip("/").rsplit("/", 1)[-1]
        return key.values.get(str(value), value)
    return value


def _format_quantity(nbytes: float, like: Any, raising: bool) -> str:
    """In the family of units the key already uses (Gi/Mi binary, G/M decimal, Docker's g/m),
    the largest unit that still holds at least one: 16Gi, not 16384Mi."""
    suffix = "Gi"
    if isinstance(like, str):
        m = re.fullmatch(r"\s*\d+(?:\.\d+)?\s*([KkMGTP]i?B?|[kmgtp])?\s*", like)
        if m and m.group(1):
            suffix = m.group(1)
    if suffix.endswith("i") or suffix.endswith("iB"):
        tail = suffix[1:]
        family = [p + tail for p in "KMGT"]
    elif suffix.islower():
        family = list("kmgt")
    else:
        tail = suffix[1:]
        family = [p + tail for p in "KMGT"]
    factors = [(_QUANTITY_FACTOR.get(u) or _QUANTITY_FACTOR[u.upper()], u) for u in family]
    factor, unit = next(((f, u) for f, u in reversed(factors) if nbytes / f >= 1), factors[0])
    amount = nbytes / factor
    whole = math.ceil(amount - 1e-9) if raising else max(1, round(amount))
    return f"{whole}{unit}"


def _rounded(value: float, like: Any, raising: bool) -> Any:
    if isinstance(like, float) or (isinstance(like, str) and "." in like):
        return round(value, 3)
    if raising:
        return math.ceil(value - 1e-9)
    return int(value) if value >= 1 or value == 0 else round(value, 3)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).replace(",", "").strip())
    except ValueError:
        return None
