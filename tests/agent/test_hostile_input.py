"""Hostile proposals: whatever a model (or a fuzzer) proposes, nothing it says can hurt.

Arbitrary JSON goes through the recipe model and the guardrails; what they accept trains
without crashing; every numeric knob is bounded; strings from a model stay inert data (no
shell, file path, eval/exec, format string or SQL text is ever built from them); and an API
key in the environment never appears in anything recipelab writes or prints.
"""

from __future__ import annotations

import ast
import io
import json
import math
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import (
    CampaignSettings,
    ExecutorSettings,
    LadderSettings,
    ProposerSettings,
    SearchSettings,
    WindowSettings,
)
from recipelab.guardrails import judge
from recipelab.recipe import Recipe
from recipelab.trainer.loop import run_trial
from recipelab.trainer.spec import CorpusSpec, TrialSpec
from tests.guardrails.factories import BASELINE, context, measured
from tests.guardrails.test_properties import edits, merged, plausible_edits
from tests.proposer.fake_openai import (
    AUTHORIZATION,
    NOT_A_COMPLETION,
    FakeOpenAI,
    error,
    steered,
    text,
)

from .audit import audit
from .conftest import read_jsonl

SRC = Path(__file__).resolve().parents[2] / "src" / "recipelab"
CTX = context(measurements=(measured(BASELINE, overhead_s=1.0),), timeout_s=3600.0)
RESOURCE_REASONS = {"oom", "timeout", "disk_full"}
TRAINING_OUTCOMES = {"nan", "diverged"}  # a bad recipe's honest result, not a crash


def numeric_bounds() -> dict[str, tuple[float | None, float | None]]:
    """Each numeric knob's declared lower and upper bound, from the recipe's JSON schema."""
    schema = Recipe.model_json_schema()
    found: dict[str, tuple[float | None, float | None]] = {}

    def walk(properties: dict[str, Any], prefix: str) -> None:
        for name, spec in properties.items():
            if "$ref" in spec:
                walk(schema["$defs"][spec["$ref"].rsplit("/", 1)[-1]]["properties"], f"{prefix}{name}.")
            elif spec.get("type") in ("integer", "number"):
                low = spec.get("minimum", spec.get("exclusiveMinimum"))
                high = spec.get("maximum", spec.get("exclusiveMaximum"))
                found[f"{prefix}{name}"] = (low, high)

    walk(schema["properties"], "")
    return found


def test_every_numeric_knob_of_a_recipe_has_a_lower_and_an_upper_bound() -> None:
    bounds = numeric_bounds()
    assert set(bounds) == {k for k, v in BASELINE.knobs().items()
                           if isinstance(v, int | float) and not isinstance(v, bool)}
    assert all(low is not None and high is not None for low, high in bounds.values()), bounds


@settings(max_examples=300, deadline=None)
@given(st.one_of(plausible_edits, edits))
def test_an_accepted_candidate_has_every_number_finite_and_within_its_bounds(
        edit: dict[str, Any]) -> None:
    verdict = judge(merged(edit), CTX)
    if verdict.recipe is None:
        return
    knobs = verdict.recipe.knobs()
    for name, (low, high) in numeric_bounds().items():
        value = knobs[name]
        assert math.isfinite(value) and low is not None and high is not None
        assert low <= value <= high, (name, value)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                 HealthCheck.function_scoped_fixture])
@given(edit=plausible_edits)
def test_an_accepted_candidate_trains_without_crashing(
        edit: dict[str, Any], tmp_path: Path, corpus: CorpusSpec) -> None:
    verdict = judge(merged(edit), CTX)
    assume(verdict.accepted and verdict.recipe is not None)
    assert verdict.recipe is not None
    spec = TrialSpec(trial_id="fuzz", recipe=verdict.recipe, corpus=corpus,
                     out_dir=str(tmp_path / "fuzz"), device="cpu")

    result = run_trial(spec, log=io.StringIO())

    if result.status == "failed":
        assert result.reason in RESOURCE_REASONS | TRAINING_OUTCOMES, (edit, result.message)


# --- strings from a model stay data -------------------------------------------------------------


def calls_in_package() -> list[tuple[str, int, str, ast.Call]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = (func.id if isinstance(func, ast.Name)
                        else func.attr if isinstance(func, ast.Attribute) else "")
                found.append((str(path.relative_to(SRC)), node.lineno, name, node))
    return found


LAZY_EXPORTS = "lazy.py"
"""The one dynamic import: a package's entry point, by a name its own constant table maps to
a recipelab module (tests/test_lazy.py checks every table), never by text from outside."""


def test_the_package_never_evaluates_text_or_hands_it_to_a_shell() -> None:
    builtins = {"eval", "exec", "compile", "__import__"}
    shell_helpers = {"system", "popen", "getoutput", "getstatusoutput"}
    offenders = []
    for path, line, name, call in calls_in_package():
        builtin = isinstance(call.func, ast.Name) and name in builtins
        shell = isinstance(call.func, ast.Attribute) and name in shell_helpers
        dynamic_import = name == "import_module" and not all(
            isinstance(arg, ast.Constant) for arg in call.args) and path != LAZY_EXPORTS
        shell_flag = any(kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                                    and kw.value.value is False)
                         for kw in call.keywords)
        if builtin or shell or dynamic_import or shell_flag:
            offenders.append(f"{path}:{line} {name}()")
    assert offenders == []


def built_string(node: ast.expr) -> bool:
    """Whether ``node`` builds a string at run time (f-string, concatenation, %, format)."""
    return (isinstance(node, ast.JoinedStr | ast.BinOp)
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("format", "join")))


def test_sql_is_never_built_from_text() -> None:
    # Statements are SQLAlchemy constructs from the model classes, with values as bound
    # parameters; the only SQL strings are literals (pragmas).
    raw_sql = [f"{path}:{line} {name}()" for path, line, name, call in calls_in_package()
               if name in ("text", "execute", "exec_driver_sql", "executescript", "executemany")
               and call.args and built_string(call.args[0])]
    assert raw_sql == []


def test_format_strings_are_never_taken_from_data() -> None:
    # A template taken from data would let "{0.__class__}" in a model's text reach into
    # objects; every template in the package is a literal or a module constant.
    def literal(node: ast.expr) -> bool:
        return isinstance(node, ast.Constant) or (isinstance(node, ast.Name) and node.id.isupper())

    dynamic = [f"{path}:{line}" for path, line, name, call in calls_in_package()
               if name in ("format", "format_map") and isinstance(call.func, ast.Attribute)
               and not literal(call.func.value)]
    assert dynamic == []


HOSTILE = ("$(touch pwned) `touch pwned` ; rm -rf ~ && cat /etc/passwd | ../../../outside "
           "{0.__class__.__mro__} %s%n%x '); DROP TABLE trials; -- {authorization}")
SECRET = "sk-live-9b1d0f27c4e84a6b"  # noqa: S105 - a made-up key the test hunts for


@dataclass(frozen=True)
class Run:
    """A finished ``recipelab run``: its campaign directory and everything it printed."""

    directory: Path
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def hostile_campaign(tmp_path_factory: pytest.TempPathFactory, corpus: CorpusSpec) -> Iterator[Run]:
    """A campaign whose LLM answers with shell, path, format and SQL injections, echoes the
    API key back in its text and in its errors, and names files outside the campaign.

    It runs as ``recipelab run`` in its own process, as a user starts it, so that every line
    it prints is captured from its first (an in-process campaign would print before a test's
    ``capfd`` starts capturing).
    """
    server = FakeOpenAI().start()
    server.script(
        # The LLM steers the sampler: it answers with a pick and changes, the preflight's
        # probe first (one campaign turn), then the campaign's turns.
        steered(pick=1, changes=[], hypothesis=HOSTILE),
        steered(pick=1, changes=[], hypothesis=HOSTILE),
        text(json.dumps({"pick": 1, "changes": [
            {"knob": "schedule.kind", "value": "../../outside"},
            {"knob": "optimizer.lr", "value": "__import__('os')"}], "hypothesis": HOSTILE})),
        error(401, f"invalid key {AUTHORIZATION}"),
        steered(pick=1, changes=[], hypothesis=HOSTILE),
    )
    root = tmp_path_factory.mktemp("hostile")
    env = {**os.environ, "RECIPELAB_LLM_API_KEY": SECRET, "COLUMNS": "200",
           "RECIPELAB_CACHE": str(corpus.cache_dir)}
    done = subprocess.run(
        [sys.executable, "-m", "recipelab", "run", "--dir", str(root / "campaign"),
         "--name", "hostile", "--preset", "tiny", "--iterations", "4", "--promote", "1",
         "--stress-steps", "20", "--proposer", "llm", "--llm-base-url", server.base_url,
         "--trial-timeout", "120"],
        cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False)
    server.stop()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    yield Run(root / "campaign", done.stdout, done.stderr)


def test_hostile_text_is_stored_verbatim_as_data_and_touches_nothing_else(
        hostile_campaign: Run) -> None:
    directory = hostile_campaign.directory
    books = audit(directory, "hostile")
    assert books.clean, books
    assert sorted(p.name for p in directory.parent.iterdir()) == ["campaign"]
    assert not list(directory.parent.rglob("pwned")) and not list(directory.parent.rglob("outside"))
    from_model = [r for r in read_jsonl(directory / "trajectory.jsonl")
                  if r["proposer"].startswith("llm:")]
    assert from_model
    expected = "picked TPE candidate 1 of 4: " + HOSTILE.replace(AUTHORIZATION,
                                                                   "Bearer [redacted]")
    assert all(r["hypothesis"] == expected for r in from_model)
    with sqlite3.connect(directory / "trajectory.sqlite") as db:
        stored = {row[0] for row in db.execute("SELECT hypothesis FROM trials WHERE proposer LIKE 'llm:%'")}
    assert stored == {expected}


def test_the_api_key_appears_in_nothing_recipelab_writes_or_prints(hostile_campaign: Run) -> None:
    directory = hostile_campaign.directory
    written = {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()}
    assert any(p.name == "trial.log" for p in written) and any(p.name == "events.jsonl" for p in written)
    leaks = [str(path) for path, data in written.items() if SECRET.encode() in data]
    printed = hostile_campaign.stdout + hostile_campaign.stderr
    assert "campaign hostile" in printed, "the console from the first line on"
    assert leaks == []
    assert SECRET not in printed


# --- a server that answers 200 with what is not a chat completion ------------------------------------


def test_a_campaign_against_a_server_answering_pages_and_broken_completions_completes_its_budget(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    unreadable = [NOT_A_COMPLETION[kind] for kind in
                  ("html page", "json without choices", "choice without message")]
    server = FakeOpenAI().start()
    server.script(*unreadable, steered(changes=[{"knob": "optimizer.lr", "value": 0.004}]),
                  *unreadable)
    server.default = NOT_A_COMPLETION["html page"]
    settings = CampaignSettings(name="pages", preset="tiny", corpus=corpus,
                                window=WindowSettings(iterations=5, trial_timeout_s=120),
                                ladder=LadderSettings(promote=0), search=SearchSettings(noise_seeds=1),
                                proposer=ProposerSettings(kind="llm", llm_base_url=server.base_url),
                                executor=ExecutorSettings(parallel=1))
    try:
        Campaign(settings, tmp_path / "campaign").run()
    finally:
        server.stop()
    directory = tmp_path / "campaign"
    books = audit(directory, "pages")
    assert books.clean, books
    proxies = [r for r in books.records if r["kind"] == "proxy" and r["status"] != "rejected"]
    assert len(proxies) == 5
    fallbacks = [e for e in read_jsonl(directory / "events.jsonl") if e["event"] == "llm_fallback"]
    assert fallbacks, "the unreadable answers made the LLM's turns fall back"
    causes = " ".join(e["cause"] for e in fallbacks)
    assert "holds no 'message'" in causes and "content-type 'text/html'" in causes
    assert any(r["proposer"].startswith("llm:") for r in books.records), "and it recovered"
