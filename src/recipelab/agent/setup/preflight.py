"""The preflight: prove, before the first trial, that tonight's campaign can run.

A campaign started at 10 pm and read at 8 am must not spend the night failing the same way
100 times. So ``recipelab check`` (and ``recipelab run``, before anything else) runs a few
small checks, each a function returning one :class:`CheckResult` (ok, warning or error,
what was found, the fix), and refuses the night when any of them is an error:

- ``input``: the preset, target, ``--until`` time and LLM URL are well formed;
- ``device``: the requested device exists (``--device cuda`` on a machine without CUDA is an
  error now, not 100 failed trials);
- ``corpus``: the corpus resolves, reads, tokenizes and holds the validation slice and the
  training tokens; it also builds the tokenized cache, so the first trial finds it warm;
- ``guardrails``: the baseline recipe passes the guardrails (memory with the reserve, the
  precision on this hardware, ...);
- ``memory``: which memory model the guardrail uses and how much memory is kept for an LLM
  server sharing the device;
- ``disk``: the campaign directory's disk is writable and has room for the trials' files,
  the rung and stress runs' checkpoints and the tokenized corpus;
- ``trial``: the baseline trains 2 steps and is evaluated in full in a real trainer
  subprocess on the real device and precision, so a path that can only fail on the target
  (fp8 through TransformerEngine, bf16) fails in the first minute;
- ``llm``: the configured endpoint is ready and returns one schema-valid proposal, or the
  campaign runs classical-only tonight (a warning: the night still runs).

Nothing here imports torch at module level; the checks that need it import it lazily.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from recipelab.agent.guard_context import guard_context
from recipelab.agent.phases.attribution_cost import EXPECTED_GROUPS, expected_runs
from recipelab.agent.phases.width_cost import planned_recipes as planned_width_recipes
from recipelab.agent.setup.machine import Resolved
from recipelab.agent.setup.proposer_choice import (
    classical_proposer,
    llm_configured,
    llm_proposer,
    proposer_name,
)
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.setup.settings_components import UNIFIED_MEMORY_RESERVE_GIB
from recipelab.fsutil import is_disk_full
from recipelab.guardrails.base import DeviceInfo, GuardContext, gib
from recipelab.recipe import Recipe
from recipelab.runner import Executor, LocalExecutor
from recipelab.trajectory.store import TrajectoryStore
from recipelab.units import GIB, MIB

Status = Literal["ok", "warning", "error"]

BUILTIN_CORPORA = ("python-docs", "python-source")

CORPUS_MARGIN = 1.25
"""Read 25% more text than the longest run's tokens: the BPE estimate below may be short,
and a little more text than one pass costs nothing."""

SPLIT_SLACK_BYTES = 64 * 1024
"""Validation text beyond the eval slice: the split moves to the next newline, which in a
corpus of long documents (FineWeb's rows are a few KiB) can cost the validation text one."""

BYTES_PER_TOKEN = {"byte": 1.0, "bpe": 4.0}
"""UTF-8 bytes behind one token: exactly 1 for the byte tokenizer; about 4 for a byte-level
BPE on English prose (GPT-2's ratio), fewer at small vocabularies, so a capped BPE corpus
errs towards more text, never less."""


UNIFIED_MEMORY_TOLERANCE = 0.1
"""A GPU whose memory is within 10% of the host's RAM shares it (GB10, Grace Hopper APUs)."""

TRIAL_FILES_BYTES = 256 * 1024
"""spec.json, trial.log and result.json of one trial: a 1,000-step result with its curve is
about 100 KiB, a proxy trial's a few KiB."""

CHECKPOINT_BYTES_PER_PARAM = 12
"""A rung or stress checkpoint: fp32 weights (4 B) and AdamW's two moments (8 B) per parameter."""

MIN_TRIAL_SECONDS = 10.0
"""For a campaign bounded by time, the most trials it can run assumes none is shorter."""

PREFLIGHT_STEPS = 2
LLM_CONNECT_TIMEOUT_S = 3.0
LLM_READINESS_TIMEOUT_S = 45.0
"""How long a server that accepts connections may take to say it is ready (a NIM loading
its weights); one that refuses connections is down at once."""
PROBE_BYTES = 64 * 1024


@dataclass(frozen=True)
class CheckResult:
    """One line of the preflight table: what was checked, found, and how to fix it."""

    name: str
    status: Status
    what: str
    fix: str = ""


@dataclass
class Preflight:
    """Every check's result."""

    results: list[CheckResult] = field(default_factory=list)

    @property
    def errors(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors


# --- what the campaign will need ---------------------------------------------------------------


def longest_run_tokens(settings: CampaignSettings) -> int:
    """Training tokens of the campaign's longest run: the top rung's (the proxy's without a
    ladder, ``promote`` 0)."""
    baseline = settings.baseline()
    top = settings.ladder.stress_steps if settings.ladder.promote else baseline.steps
    return max(top, baseline.steps) * baseline.tokens_per_step


def corpus_bytes_needed(settings: CampaignSettings, baseline: Recipe | None = None) -> int:
    """The corpus bytes worth reading: the longest run's tokens with :data:`CORPUS_MARGIN`,
    converted by :data:`BYTES_PER_TOKEN`, plus the validation share (``val_fraction`` of the
    text, at least the eval slice)."""
    baseline = baseline or settings.baseline()
    corpus = settings.corpus
    train = longest_run_tokens(settings) * CORPUS_MARGIN * BYTES_PER_TOKEN[baseline.tokenizer]
    total = max(train / (1.0 - corpus.val_fraction),
                (baseline.eval_bytes * CORPUS_MARGIN + SPLIT_SLACK_BYTES) / corpus.val_fraction)
    return max(1024, math.ceil(total))


def is_path_corpus(source: str) -> bool:
    return source not in BUILTIN_CORPORA


def absolute_corpus(settings: CampaignSettings, *, cap: int | None) -> CampaignSettings:
    """The settings with a path corpus made absolute (so a resume from another directory or
    a Ray worker reads the same files) and capped at ``cap`` bytes when no cap is set."""
    corpus = settings.corpus
    if not is_path_corpus(corpus.source):
        return settings
    update: dict[str, object] = {"source": str(Path(corpus.source).expanduser().resolve())}
    if corpus.max_bytes is None and cap is not None:
        update["max_bytes"] = cap
    return settings.model_copy(update={"corpus": corpus.model_copy(update=update)})


def is_unified_memory(device: DeviceInfo, host_memory_bytes: int) -> bool:
    """Whether the GPU allocates from the host's RAM, so an LLM server beside the trials
    takes memory the trials would otherwise get: a GB10, or any GPU whose memory is about
    the host's."""
    if device.kind != "cuda":
        return False
    if "GB10" in device.name.upper():
        return True
    return abs(device.memory_bytes - host_memory_bytes) <= UNIFIED_MEMORY_TOLERANCE * host_memory_bytes


def default_memory_reserve_gib(device: DeviceInfo) -> float:
    """``--memory-reserve-gib`` when it is not given: :data:`UNIFIED_MEMORY_RESERVE_GIB` on a
    unified-memory device, where the LLM server shares the trials' memory, else 0."""
    import psutil

    return UNIFIED_MEMORY_RESERVE_GIB if is_unified_memory(
        device, psutil.virtual_memory().total) else 0.0


def planned_proxy_trials(settings: CampaignSettings, now: datetime | None = None) -> int:
    """The most proxy trials the budget allows (time budgets assume :data:`MIN_TRIAL_SECONDS`
    per trial)."""
    counts = [settings.window.iterations] if settings.window.iterations is not None else []
    now = now or datetime.now().astimezone()
    deadline = settings.window.deadline(now)
    if deadline is not None:
        counts.append(math.ceil((deadline - now).total_seconds() / MIN_TRIAL_SECONDS)
                      * planned_in_flight(settings))
    return max(1, min(counts)) if counts else 1


def planned_in_flight(settings: CampaignSettings) -> int:
    """``parallel``, or 1 while it is still ``auto`` (a Ray campaign before its executor
    saw the cluster): an estimate's input, never a scheduling decision."""
    return settings.executor.parallel if isinstance(settings.executor.parallel, int) else 1


def disk_needed_bytes(settings: CampaignSettings, baseline: Recipe) -> tuple[int, str]:
    """The bytes tonight's campaign writes, and how that was estimated: every run longer than
    a proxy (rung, stress, attribution, width) keeps its last checkpoint."""
    trials = planned_proxy_trials(settings)
    ladder = settings.ladder.planned_ladder(baseline.steps, max(0, trials - settings.search.noise_seeds))
    stress = (ladder[-1].runs if ladder else 0) + settings.ladder.fidelity
    rung = sum(r.runs for r in ladder[:-1])
    probes = sum(r.probes for r in ladder)  # proxy-length: no checkpoint
    attribution = (expected_runs(EXPECTED_GROUPS, settings.search.noise_seeds)
                   if settings.ladder.attribution and ladder else 0)
    widths = planned_width_recipes(settings)
    longer = stress + rung + attribution
    params = baseline.param_count()
    checkpoint = CHECKPOINT_BYTES_PER_PARAM * params
    width_checkpoints = sum(CHECKPOINT_BYTES_PER_PARAM * r.param_count() for r in widths)
    # each longer run keeps its last checkpoint; one being written briefly doubles its run's
    checkpoints = (longer + min(longer, planned_in_flight(settings))) * checkpoint if longer else 0
    files = (trials + probes + longer + len(widths)) * TRIAL_FILES_BYTES
    corpus = 4 * (settings.corpus.max_bytes or 0)  # int32 token ids of the capped text
    how = (f"{trials + probes:,} proxy trials and probes x {TRIAL_FILES_BYTES // 1024} KiB, {stress} stress, "
           f"{rung} rung and {attribution} attribution checkpoint(s) of {params:,} params x "
           f"{CHECKPOINT_BYTES_PER_PARAM} B = {size(checkpoint)}"
           + (f", the width rung's {len(widths)} checkpoints {size(width_checkpoints)}" if widths else "")
           + (f", tokenized corpus {size(corpus)}" if corpus else ""))
    return files + checkpoints + width_checkpoints + corpus, how


# --- the checks ------------------------------------------------------------------------------


def check_device(settings: CampaignSettings, executor: Executor
                 ) -> tuple[CheckResult, DeviceInfo | None]:
    """The requested device exists where trials run (a Ray worker for ``--executor ray``);
    the result names it and its memory: the device the campaign's guardrails judge."""
    from recipelab.guardrails.hardware import resolve_device

    try:
        device = executor.device(settings.executor.device) or resolve_device(settings.executor.device)
    except ValueError as error:
        return CheckResult(
            "device", "error", str(error),
            "install the CUDA build of torch (pip install torch --index-url "
            "https://download.pytorch.org/whl/cu128, or use the NGC PyTorch container), "
            "or run with --device cpu"), None
    return CheckResult("device", "ok", f"{device.kind}: {device.name}, "
                       f"{gib(device.memory_bytes)}"), device


def corpus_fix(settings: CampaignSettings, baseline: Recipe, train_tokens: int) -> str:
    """The one option that lets the top rung read its text once: the larger built-in corpus
    where it holds enough, else a corpus of the size needed, else (with the alternatives) a
    top rung as long as this corpus allows."""
    from recipelab.trainer.data import PYTHON_SOURCE_MAX_BYTES

    bytes_needed = corpus_bytes_needed(settings, baseline)
    per_token = BYTES_PER_TOKEN[baseline.tokenizer]
    fits_source = ((1 - settings.corpus.val_fraction) * PYTHON_SOURCE_MAX_BYTES / per_token
                   >= longest_run_tokens(settings) * CORPUS_MARGIN)
    once = train_tokens // baseline.tokens_per_step
    otherwise = (f". Otherwise --stress-steps {once} reads this corpus once" if once > baseline.steps
                 else ". Otherwise")
    otherwise += (", and " if once > baseline.steps else " ") + (
        "--repeat-text ranks on repeated text knowingly")
    if settings.corpus.source != "python-source" and fits_source:
        return f"use --corpus python-source (the larger built-in corpus){otherwise}"
    return f"use --corpus PATH with at least {bytes_needed / MIB:,.0f} MiB of text{otherwise}"


def check_corpus(settings: CampaignSettings, baseline: Recipe) -> CheckResult:
    """The corpus resolves, reads, tokenizes and is big enough; builds the tokenized cache."""
    from recipelab.trainer.data import DataError, load_dataset

    corpus = settings.corpus
    started = time.monotonic()
    try:
        data = load_dataset(corpus, tokenizer=baseline.tokenizer,
                            vocab_size=baseline.shape.vocab_size, eval_bytes=baseline.eval_bytes,
                            min_train_tokens=baseline.tokens_per_step + 1)
    except DataError as error:
        what, _, fix = str(error).partition(": ")
        fix = fix.replace("corpus.source", "--corpus").replace("corpus.max_bytes",
                                                                 "--corpus-max-bytes")
        return CheckResult("corpus", "error", what if fix else str(error),
                           fix or "fix --corpus")
    except OSError as error:
        return CheckResult("corpus", "error", f"cannot read corpus {corpus.source}: {error}",
                           "fix the path or its permissions in --corpus")
    seconds = time.monotonic() - started
    capped = f", read capped at {corpus.max_bytes:,} bytes" if corpus.max_bytes else ""
    what = (f"{data.description}: {len(data.train):,} training tokens, eval slice "
            f"{data.eval_bytes:,} bytes, tokenized cache ready ({seconds:.1f} s){capped}")
    longest = longest_run_tokens(settings)
    if len(data.train) < longest:
        repeated = (f"{what}; the {settings.ladder.stress_steps}-step top rung reads "
                    f"{longest:,} tokens, {longest / len(data.train):.1f} passes over the text")
        if settings.ladder.repeat_text:
            return CheckResult("corpus", "warning", f"{repeated} (--repeat-text): the ranking "
                               "may reward regularization a cloud run reading each token once "
                               "does not need", "use a bigger corpus to rank on fresh text")
        return CheckResult(
            "corpus", "error", f"{repeated}; a ranking on repeated text rewards regularization, "
            "not the recipe a cloud run reading each token once should train",
            corpus_fix(settings, baseline, len(data.train)))
    return CheckResult("corpus", "ok", what)


def check_guardrails(settings: CampaignSettings, baseline: Recipe,
                     context: GuardContext) -> CheckResult:
    """The baseline recipe itself passes the guardrails (or no candidate near it will)."""
    from recipelab.guardrails import CHECKS, judge

    verdict = judge(baseline, context, checks=[c for c in CHECKS if c not in settings.search.skip_checks])
    if verdict.accepted:
        return CheckResult("guardrails", "ok",
                           f"the {settings.preset} baseline ({baseline.param_count():,} params, "
                           f"{baseline.precision}) passes every guardrail")
    return CheckResult("guardrails", "error",
                       f"the guardrails reject the baseline: {' '.join(verdict.reasons)}",
                       "choose another --preset, --budget or --device (or lower "
                       "--memory-reserve-gib)")


def check_memory(settings: CampaignSettings, baseline: Recipe,
                 context: GuardContext) -> CheckResult:
    """Which memory model the guardrail uses, and the memory kept for the LLM server."""
    import psutil

    from recipelab.guardrails.memory import predict_with_model

    device = context.device
    predicted, model = predict_with_model(baseline, context)
    reserve = int(settings.executor.memory_reserve_gib * GIB)
    unified = is_unified_memory(device, psutil.virtual_memory().total)
    what = (f"baseline peak predicted {gib(predicted)} by {model}; {gib(device.memory_bytes)} on "
            f"{device.name}, {gib(reserve)} of it kept free for an LLM server")
    if context.parallel_on_one_device > 1:
        what += (f"; {context.parallel_on_one_device} trials in flight need "
                 f"{gib(predicted * context.parallel_on_one_device)} together")
    if unified:
        what += (f" (unified memory: the default reserve is {UNIFIED_MEMORY_RESERVE_GIB:g} GiB, "
                 "an 8B model in bf16 with 32k tokens of KV cache)")
        if reserve < UNIFIED_MEMORY_RESERVE_GIB * GIB and llm_configured(settings):
            return CheckResult(
                "memory", "warning", what,
                "raise --memory-reserve-gib to what the LLM server takes, or trials may push "
                "it out of memory")
    if "fitted" not in model:
        what += " ('recipelab envelope' once on this machine measures a memory line)"
    return CheckResult("memory", "ok", what)


def size(n_bytes: float) -> str:
    """A byte count for the table: MiB below a GiB, GiB above."""
    return f"{n_bytes / MIB:,.1f} MiB" if n_bytes < GIB else gib(n_bytes)


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(settings: CampaignSettings, baseline: Recipe, directory: Path) -> CheckResult:
    """The campaign directory's disk takes a write and has room for the planned campaign."""
    where = _existing_ancestor(directory)
    fix_full = (f"free some space on the disk holding {directory}, or start the campaign "
                "elsewhere with --dir")
    try:
        with tempfile.NamedTemporaryFile(dir=where, prefix=".recipelab-probe-") as probe:
            probe.write(b"\0" * PROBE_BYTES)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as error:
        if is_disk_full(error):
            return CheckResult("disk", "error",
                               f"cannot write in campaign directory {directory}: {error}",
                               fix_full)
        return CheckResult("disk", "error", f"cannot write in campaign directory {directory}: "
                           f"{error}", f"make {where} writable, or use another --dir")
    needed, how = disk_needed_bytes(settings, baseline)
    free = shutil.disk_usage(where).free
    what = f"{size(free)} free at {where}; the campaign needs about {size(needed)} ({how})"
    if free < needed:
        return CheckResult("disk", "error", what, fix_full)
    return CheckResult("disk", "ok", what)


def check_trial(settings: CampaignSettings, baseline: Recipe, executor: Executor) -> CheckResult:
    """The baseline trains :data:`PREFLIGHT_STEPS` steps and is evaluated in full, in a real
    trainer process where the campaign's trials will run, with the real device and precision."""
    recipe = baseline.apply({"steps": PREFLIGHT_STEPS,
                             "schedule.warmup_steps": min(baseline.schedule.warmup_steps, 1)})
    with tempfile.TemporaryDirectory(prefix="recipelab-preflight-") as scratch:
        spec = settings.trial_spec("preflight", "proxy", recipe, Path(scratch) / "preflight",
                                   log_every=1, telemetry_interval_s=1.0)
        result = executor.wait(executor.submit(spec, timeout_s=settings.window.trial_timeout_s))
    if result.status == "complete" and result.val_bpb is not None:
        seconds = sum(s or 0.0 for s in (result.setup_s, result.train_s, result.eval_s))
        peak = f", peak memory {gib(result.peak_memory_bytes)}" if result.peak_memory_bytes else ""
        device = result.provenance.device if result.provenance else settings.executor.device
        return CheckResult("trial", "ok",
                           f"baseline trained {PREFLIGHT_STEPS} steps in {recipe.precision} on "
                           f"{device} and evaluated in full: val_bpb {result.val_bpb:.3f} in "
                           f"{seconds:.1f} s{peak}")
    fixes = {
        "oom": "lower the preset's batch (--preset, --budget) or raise the memory available",
        "disk_full": "free some space on the disk",
        "timeout": "raise --trial-timeout, or choose a smaller --preset",
    }
    return CheckResult("trial", "error",
                       f"a {PREFLIGHT_STEPS}-step trial of the baseline in {recipe.precision} "
                       f"failed ({result.reason}): {result.message}",
                       fixes.get(result.reason or "", "read the message; fix the device or "
                                 "precision (--device, --preset), or the environment"))


def proven_trial(settings: CampaignSettings, directory: Path) -> str | None:
    """A proxy trial this campaign already completed on the requested device, if any.

    A resumed campaign has shown its trial path works (same recipe family, precision, corpus
    and device), so its preflight need not train again: a restart after a crash or a kill is
    back to work in a second or two, not after another trial.
    """
    path = directory / TrajectoryStore.JSONL
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn line: the store sets it aside when the campaign opens
        if not isinstance(record, dict) or record.get("kind") != "proxy" \
                or record.get("status") != "complete":
            continue
        device = str((record.get("provenance") or {}).get("device", ""))
        if settings.executor.device == "auto" or device.startswith(settings.executor.device):
            return str(record.get("trial_id"))
    return None


def check_calibration(settings: CampaignSettings, baseline: Recipe) -> CheckResult | None:
    """A warning when ``--calibrate-from`` names trials of another precision than the
    campaign's (see :func:`recipelab.agent.setup.priors.precision_mismatch`); None without one."""
    if not settings.search.calibrate_from:
        return None
    from recipelab.agent.setup.priors import precision_mismatch
    from recipelab.trajectory.calibration import load_calibration

    calibration = load_calibration(settings.search.calibrate_from)
    mismatch = precision_mismatch(calibration, baseline.precision)
    if mismatch is None:
        return CheckResult("calibrate", "ok", f"{len(calibration.trials)} prior trial(s), all "
                           f"in this campaign's {baseline.precision}")
    what, _, fix = mismatch.partition("; calibrate from")
    return CheckResult("calibrate", "warning", what, "calibrate from" + fix)


LLM_DOWN_TONIGHT = ("the sampler proposes until the LLM answers: its turns keep asking it, "
                    "backing off, and give it the seat back at its first valid reply")


def check_llm(settings: CampaignSettings, baseline: Recipe) -> CheckResult | None:
    """The LLM endpoint answers one turn as the campaign asks it (steering the sampler);
    None when no LLM is configured. A failure is a warning, never a verdict on the night:
    the campaign keeps asking the LLM on its turns."""
    if not llm_configured(settings) or proposer_name(settings) == "classical":
        return None
    from recipelab.proposer import default_space
    from recipelab.proposer.llm_endpoint import LLMConfig, LLMUnavailable

    fix = ("start the LLM server (or fix its URL); --proposer classical runs without it and "
           "silences this")
    try:
        base_url = LLMConfig.from_env(**({"base_url": settings.proposer.llm_base_url}
                                         if settings.proposer.llm_base_url else {})).base_url
    except ValueError as error:
        return CheckResult("llm", "warning", f"no usable LLM configuration ({error})", fix)
    down = _refuses_connections(base_url)
    if down:
        return CheckResult("llm", "warning", f"LLM endpoint {base_url}: {down}; "
                           f"{LLM_DOWN_TONIGHT}", fix)
    target = settings.target_spec()
    space = default_space(baseline, settings.searchable)
    started = time.monotonic()
    try:
        proposer = llm_proposer(settings, baseline, space, target,
                                classical_proposer(settings, baseline, space),
                                readiness_timeout_s=LLM_READINESS_TIMEOUT_S, max_retries=1)
    except ValueError as error:
        return CheckResult("llm", "warning", f"no usable LLM configuration ({error})", fix)
    try:
        proposals = proposer.propose([], 1)
    except (LLMUnavailable, ValueError) as error:
        return CheckResult("llm", "warning", f"{error}; {LLM_DOWN_TONIGHT}", fix)
    finally:
        proposer.close()
    if not proposals:
        return CheckResult("llm", "warning", f"LLM endpoint {base_url} returned no proposal; "
                           f"{LLM_DOWN_TONIGHT}", fix)
    return CheckResult("llm", "ok", f"{base_url} ({proposals[0].proposer}) answered a "
                       f"campaign turn in {time.monotonic() - started:.1f} s")


def _refuses_connections(url: str) -> str | None:
    """Why nothing listens at ``url``'s host and port, or None when something does."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=LLM_CONNECT_TIMEOUT_S):
            return None
    except OSError as error:
        return f"nothing answers at {host}:{port} ({error.strerror or error})"


# --- all together ----------------------------------------------------------------------------


def run_preflight(resolved: Resolved, directory: Path, *,
                  on_result: Callable[[CheckResult], None] | None = None) -> Preflight:
    """Run every check on the settings :func:`~recipelab.agent.setup.machine.resolve` left; the
    expensive ones (a trial, an LLM call) only when the cheap ones found nothing that would
    make them fail for a known reason. Trials run where the campaign's will: on the Ray
    cluster ``resolved`` connected to, or here without a warm worker."""
    report = Preflight()

    def add(result: CheckResult | None) -> None:
        if result is not None:
            report.results.append(result)
            if on_result is not None:
                on_result(result)

    settings = resolved.settings
    executor = resolved.executor or LocalExecutor(warm=False)
    try:
        return _run_checks(settings, directory, settings.baseline(), executor, report, add)
    finally:
        if resolved.executor is None:  # the campaign's own connection stays open for it
            executor.close()


def _run_checks(settings: CampaignSettings, directory: Path, baseline: Recipe,
                executor: Executor, report: Preflight,
                add: Callable[[CheckResult | None], None]) -> Preflight:
    device_result, device = check_device(settings, executor)
    add(device_result)
    add(check_disk(settings, baseline, directory))
    if device is not None:
        context = guard_context(settings, baseline, device)
        add(check_memory(settings, baseline, context))
        add(check_guardrails(settings, baseline, context))
    add(check_corpus(settings, baseline))
    add(check_calibration(settings, baseline))
    proven = proven_trial(settings, directory)
    if proven is not None:
        add(CheckResult("trial", "ok", f"not run again: this campaign's trial {proven} already "
                        f"trained and evaluated on {settings.executor.device}"))
    elif report.ok:
        add(check_trial(settings, baseline, executor))
    else:
        add(CheckResult("trial", "warning", "not run: the errors above would make it fail",
                        "fix them, then run 'recipelab check' again"))
    add(check_llm(settings, baseline))
    return report
