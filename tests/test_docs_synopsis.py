"""The command synopses of docs/pipeline.md against `hepix COMMAND --help`.

Every flag a synopsis names is a flag of that command's parser, every flag of the parser (but
``-h/--help``) is in the synopsis, and the choices a synopsis lists (``--scheme ckks|bfv``) are the
parser's.  The flags every Spark job takes are written once, in the sentence naming those jobs.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from jobs.cli import build_parser

DOC = (Path(__file__).resolve().parents[1] / "docs" / "pipeline.md").read_text()
FLAG = r"--[a-z][\w-]*"
CHOICES = rf"({FLAG}) ([\w.-]+(?:\|[\w.-]+)+)"


def synopses() -> dict[str, str]:
    """Each command's synopsis in the code block of "The command line": its ``hepix COMMAND`` line and the
    lines under it."""
    block = DOC.split("## The command line", 1)[1].split("```", 2)[1]
    found: dict[str, str] = {}
    command = None
    for line in block.splitlines():
        if m := re.match(r"hepix ([\w-]+)", line):
            command = m[1]
        if command:
            found[command] = found.get(command, "") + line + "\n"
    return found


def spark_flags() -> tuple[set[str], set[str]]:
    """The commands of the sentence "The Spark jobs (...) also take ...", and the flags it names."""
    m = re.search(r"The Spark jobs \(([^)]*)\) also take (.*?)\.\s", DOC, re.S)
    assert m, "docs/pipeline.md no longer says which flags every Spark job takes"
    return set(re.findall(r"`([\w-]+)`", m[1])), set(re.findall(FLAG, m[2]))


def parsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


PARSERS, SYNOPSES = parsers(), synopses()
SPARK_JOBS, SPARK_FLAGS = spark_flags()


def test_every_command_has_a_synopsis():
    assert sorted(SYNOPSES) == sorted(PARSERS)
    assert SPARK_JOBS <= set(PARSERS)


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_synopsis_names_every_flag(command):
    synopsis = SYNOPSES.get(command, "")
    documented = set(re.findall(FLAG, synopsis)) | (SPARK_FLAGS if command in SPARK_JOBS else set())
    actions = PARSERS[command]._actions
    flags = {o for a in actions for o in a.option_strings} - {"-h", "--help"}
    assert sorted(documented - flags) == [], f"hepix {command}: in the doc, not in --help"
    assert sorted(flags - documented) == [], f"hepix {command}: in --help, not in the doc"
    for a in actions:
        if not a.option_strings:    # a positional argument: its name in the synopsis
            assert re.search(rf"\b{a.metavar or a.dest.upper()}\b", synopsis), f"hepix {command} {a.metavar}"


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_listed_choices_are_the_parsers(command):
    choices = {o: a.choices for a in PARSERS[command]._actions for o in a.option_strings if a.choices}
    for flag, listed in re.findall(CHOICES, SYNOPSES.get(command, "")):
        if flag in choices:
            assert sorted(listed.split("|")) == sorted(choices[flag]), f"hepix {command} {flag}"
