"""`crashcart --help` must stay instant: the CLI module may not import the heavy stack."""

import subprocess
import sys

HEAVY = ("langgraph", "duckdb", "langchain_core", "pydantic", "yaml", "openai", "anthropic")


def test_cli_module_imports_nothing_heavy():
    code = (
        "import sys, crashcart.agent.interfaces.cli as cli; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_help_lists_the_commands():
    out = subprocess.run([sys.executable, "-m", "crashcart.agent.interfaces.cli", "--help"],
                         capture_output=True, text=True, check=True)
    for command in ("eval", "diagnose", "investigate", "approve", "incidents", "guard"):
        assert command in out.stdout
