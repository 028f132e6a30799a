"""Raw logs with their expected verdict: how well `crashcart diagnose` reads a log alone.

Each case is `evals/logs/<family>/<slug>.log` beside `<slug>.yaml` (family, remedy, source,
note). The score is by family (the issue's bar) and by remedy, with a confusion matrix.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from crashcart.evals.scenario import FAMILIES, REMEDIES, one_of
from crashcart.tools.cluster import Strict
from crashcart.tools.yamlio import DataFileError, describe_validation_error, read_yaml_file

LOGS_DIR = Path(__file__).parent / "logs"


class LogExpectation(Strict):
    family: str | list[str]
    remedy: str | list[str]
    source: str
    """Where the excerpt comes from (an issue URL, owner/repo#N), or 'constructed: why'."""
    note: str | None = None
    diagnosis: list[str] | None = None

    _family = field_validator("family")(one_of(FAMILIES, "family"))
    _remedy = field_validator("remedy")(one_of(REMEDIES, "remedy"))

    @property
    def families(self) -> list[str]:
        return [self.family] if isinstance(self.family, str) else list(self.family)

    @property
    def remedies(self) -> list[str]:
        return [self.remedy] if isinstance(self.remedy, str) else list(self.remedy)


class LogResult(BaseModel):
    id: str
    path: str
    expected_family: list[str] = Field(default_factory=list)
    expected_remedy: list[str] = Field(default_factory=list)
    family: str | None = None
    remedy: str | None = None
    diagnosis: str | None = None
    confidence: float | None = None
    family_ok: bool = False
    remedy_ok: bool = False
    real_excerpt: bool = False
    source: str | None = None
    error: str | None = None


class LogSummary(BaseModel):
    total: int
    family_accuracy: float
    remedy_accuracy: float
    real_excerpts: int
    errors: int
    by_family: dict[str, dict[str, int]]
    confusion: dict[str, dict[str, int]]
    """expected family -> diagnosed family -> count."""


class LogReport(BaseModel):
    summary: LogSummary
    cases: list[LogResult]


def discover_logs(root: Path | None = None) -> list[Path]:
    root = root or LOGS_DIR
    return sorted(root.rglob("*.yaml")) if root.is_dir() else []


def _load_expectation(path: Path) -> LogExpectation:
    try:
        data = read_yaml_file(path)
        return LogExpectation.model_validate(data)
    except DataFileError as e:
        raise ValueError(str(e)) from None
    except ValidationError as e:
        raise ValueError(f"{path}: {describe_validation_error(e, data)}") from None


def run_log_case(path: Path) -> LogResult:
    from crashcart.agent.verdict import LogError, diagnose_text, read_log_bytes

    log = path.with_suffix(".log")
    result = LogResult(id=path.stem, path=str(log))
    try:
        exp = _load_expectation(path)
        result.expected_family, result.expected_remedy = exp.families, exp.remedies
        result.source = exp.source
        result.real_excerpt = not exp.source.lower().startswith("constructed")
        verdict = diagnose_text(read_log_bytes(log.read_bytes(), str(log)), source=str(log))
    except (ValueError, OSError, LogError) as e:
        result.error = str(e)
        return result
    result.family, result.remedy = verdict.family, verdict.remedy
    result.diagnosis, result.confidence = verdict.diagnosis, verdict.confidence
    result.family_ok = verdict.family in exp.families
    result.remedy_ok = verdict.remedy in exp.remedies
    return result


def run_logs(root: Path | None = None) -> LogReport:
    cases = [run_log_case(p) for p in discover_logs(root)]
    return LogReport(summary=_summarize(cases), cases=cases)


def _summarize(cases: list[LogResult]) -> LogSummary:
    scored = [c for c in cases if c.error is None]
    by_family: dict[str, dict[str, int]] = {}
    confusion: dict[str, Counter[str]] = {}
    for c in scored:
        expected = c.expected_family[0]
        row = by_family.setdefault(expected, {"total": 0, "family_ok": 0, "remedy_ok": 0})
        row["total"] += 1
        row["family_ok"] += int(c.family_ok)
        row["remedy_ok"] += int(c.remedy_ok)
        got = expected if c.family_ok else (c.family or "?")
        confusion.setdefault(expected, Counter())[got] += 1
    n = len(scored)
    return LogSummary(
        total=len(cases),
        family_accuracy=round(sum(c.family_ok for c in scored) / n, 4) if n else 0.0,
        remedy_accuracy=round(sum(c.remedy_ok for c in scored) / n, 4) if n else 0.0,
        real_excerpts=sum(c.real_excerpt for c in scored),
        errors=len(cases) - n,
        by_family=dict(sorted(by_family.items())),
        confusion={k: dict(v) for k, v in sorted(confusion.items())},
    )


def confusion_rows(summary: LogSummary) -> tuple[list[str], list[list[Any]]]:
    """The confusion matrix as a header and rows (expected family down, diagnosed across)."""
    cols = sorted({g for row in summary.confusion.values() for g in row} | set(summary.confusion))
    rows = [[exp] + [summary.confusion[exp].get(c, 0) for c in cols] for exp in summary.confusion]
    return cols, rows
