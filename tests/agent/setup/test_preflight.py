"""The preflight: each check on its own, with real files, disks, processes and sockets."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from recipelab.agent.phases.width_cost import planned_recipes as planned_width_recipes
from recipelab.agent.setup.machine import resolve
from recipelab.agent.setup.preflight import (
    CHECKPOINT_BYTES_PER_PARAM,
    TRIAL_FILES_BYTES,
    absolute_corpus,
    check_corpus,
    check_device,
    check_disk,
    check_llm,
    corpus_bytes_needed,
    default_memory_reserve_gib,
    disk_needed_bytes,
    is_unified_memory,
    proven_trial,
    run_preflight,
)
from recipelab.agent.setup.settings import (
    CampaignSettings,
    ExecutorSettings,
    LadderSettings,
    ProposerSettings,
    WindowSettings,
)
from recipelab.agent.setup.settings_components import UNIFIED_MEMORY_RESERVE_GIB
from recipelab.guardrails.base import DeviceInfo
from recipelab.runner import FakeExecutor
from recipelab.trainer.spec import CorpusSpec
from tests.proposer.fake_openai import FakeOpenAI, Reply, steered, text

GIB = 2**30


def closed_port() -> int:
    """A localhost port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_corpus_read_covers_the_longest_run_with_a_margin() -> None:
    settings = CampaignSettings(name="c", preset="spark", window=WindowSettings(iterations=1),
                                ladder=LadderSettings(stress_steps=1000))
    needed = corpus_bytes_needed(settings)
    # 1,000 steps x 16 x 1,024 byte tokens, x 1.25, over the 90% that is training text
    assert needed == pytest.approx(1000 * 16 * 1024 * 1.25 / 0.9, rel=1e-6)
    tiny = CampaignSettings(name="c", preset="tiny", window=WindowSettings(iterations=1),
                            ladder=LadderSettings(stress_steps=1))
    # a short campaign still reads enough for its validation slice (4,096 bytes, 10% share)
    assert corpus_bytes_needed(tiny) >= 4096 * 1.25 / 0.1


def test_a_path_corpus_is_saved_absolute_and_capped_and_a_builtin_stays_a_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text("hello\n")
    settings = CampaignSettings(name="c", corpus=CorpusSpec(source="text.txt"),
                                window=WindowSettings(iterations=1))
    resolved = absolute_corpus(settings, cap=5000)
    assert resolved.corpus.source == str(tmp_path / "text.txt")
    assert resolved.corpus.max_bytes == 5000
    builtin = CampaignSettings(name="c", window=WindowSettings(iterations=1))
    assert absolute_corpus(builtin, cap=5000).corpus == builtin.corpus


def test_unified_memory_is_detected_and_keeps_room_for_the_llm_server() -> None:
    host = 128 * GIB
    gb10 = DeviceInfo("cuda", "NVIDIA GB10", host, (12, 1), True, True)
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 80 * GIB, (9, 0), True, True)
    apu = DeviceInfo("cuda", "Some APU", int(0.95 * host), (9, 0), True, True)
    cpu = DeviceInfo("cpu", "a CPU", host, None, False, False)
    assert is_unified_memory(gb10, host) and is_unified_memory(apu, host)
    assert not is_unified_memory(h100, host) and not is_unified_memory(cpu, host)
    assert default_memory_reserve_gib(cpu) == 0.0
    assert UNIFIED_MEMORY_RESERVE_GIB == 24.0


def test_cuda_on_a_machine_without_it_is_an_error_with_the_fix() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    settings = CampaignSettings(name="c", preset="tiny", window=WindowSettings(iterations=1),
                                executor=ExecutorSettings(device="cuda"))
    result, device = check_device(settings, FakeExecutor())
    assert result.status == "error" and device is None
    assert "install the CUDA build of torch" in result.fix and "--device cpu" in result.fix


def test_the_device_checked_is_the_one_the_executors_workers_report() -> None:
    """With Ray the trials run on the workers: the preflight names their device, as the
    campaign's guardrails will judge it, not this machine's."""
    worker = DeviceInfo("cuda", "NVIDIA GB10", 128 * 2**30, (12, 1), True, native_bf16=True)
    settings = CampaignSettings(name="c", preset="tiny", window=WindowSettings(iterations=1),
                                executor=ExecutorSettings(device="cuda"))
    result, device = check_device(settings, FakeExecutor(device=worker))
    assert result.status == "ok" and device == worker and "NVIDIA GB10" in result.what


def test_a_missing_corpus_is_an_error_with_the_fix(tmp_path: Path) -> None:
    settings = CampaignSettings(name="c", preset="tiny",
                                corpus=CorpusSpec(source=str(tmp_path / "nothing")),
                                window=WindowSettings(iterations=1))
    result = check_corpus(settings, settings.baseline())
    assert result.status == "error"
    assert "does not exist" in result.what and "built-in corpus" in result.fix


def test_a_corpus_the_top_rung_would_read_twice_is_refused_unless_repeats_are_asked_for(
        tmp_path: Path) -> None:
    """A ranking on repeated text ranks regularization; a cloud run reads each token once."""
    text = tmp_path / "small.txt"
    text.write_text("a few words of text\n" * 3000)
    corpus = CorpusSpec(source=str(text), cache_dir=str(tmp_path / "cache"))
    settings = CampaignSettings(name="c", preset="tiny", corpus=corpus,
                                window=WindowSettings(iterations=1),
                                ladder=LadderSettings(stress_steps=1000))
    result = check_corpus(settings, settings.baseline())
    assert result.status == "error", result
    assert "9.5 passes over the text" in result.what
    assert "--corpus python-source" in result.fix and "--repeat-text" in result.fix
    assert "--stress-steps 105 reads this corpus once" in result.fix
    assert list((tmp_path / "cache" / "datasets").glob("*/meta.json")), "the cache was built"
    knowingly = settings.model_copy(update={"ladder": LadderSettings(stress_steps=1000,
                                                                     repeat_text=True)})
    assert check_corpus(knowingly, settings.baseline()).status == "warning"
    once = settings.model_copy(update={"ladder": LadderSettings(stress_steps=105)})
    assert check_corpus(once, settings.baseline()).status == "ok"
    no_ladder = settings.model_copy(update={"ladder": LadderSettings(stress_steps=1000, promote=0)})
    assert check_corpus(no_ladder, settings.baseline()).status == "ok", "the proxy is the longest"


def test_a_disk_without_room_for_the_plan_is_an_error(tmp_path: Path) -> None:
    settings = CampaignSettings(name="c", preset="tiny",
                                window=WindowSettings(iterations=10**9))  # 10^9 trial logs
    result = check_disk(settings, settings.baseline(), tmp_path / "campaigns" / "c")
    assert result.status == "error", result
    assert "free some space" in result.fix and "campaigns/c" in result.fix
    assert not (tmp_path / "campaigns").exists()


def test_the_disk_estimate_counts_each_rung_runs_checkpoint() -> None:
    """17 candidates (20 trials less 3 baseline seeds) on the ladder 20 → 60 → 180 → 540 →
    1000 steps: 6 + 2 + 2 middle-rung runs, and the baseline with its two learning-rate
    family runs at each of the three rungs; and the first rung's 34 probes (17 candidates,
    one below and one above each's rate), proxy-length, without a checkpoint."""
    with_rung = CampaignSettings(name="c", preset="tiny", window=WindowSettings(iterations=20),
                                 ladder=LadderSettings(rung_size=6))
    without = with_rung.model_copy(update={"rung_size": 0})
    needed, how = disk_needed_bytes(with_rung, with_rung.baseline())
    plain, plain_how = disk_needed_bytes(without, without.baseline())
    checkpoint = CHECKPOINT_BYTES_PER_PARAM * with_rung.baseline().param_count()
    assert needed - plain == 19 * (checkpoint + TRIAL_FILES_BYTES) + 34 * TRIAL_FILES_BYTES
    assert "19 rung and" in how and "54 proxy trials and probes" in how
    assert "36 stress" in plain_how, (
        "two finalists and the baseline at four seeds, each with its family at each")

def test_the_disk_estimate_counts_the_attribution_and_width_runs_checkpoints() -> None:
    """Attribution's runs (3 seeds × the baseline, the winner, 4 groups left out and the
    minimal edit) keep the proxy's checkpoint; the width rung's (the recommendation and the
    baseline at two widths, each at two seeds, and the recommendation's rate families at two
    more rates) keep their own models'."""
    both = CampaignSettings(name="c", preset="tiny", window=WindowSettings(iterations=20))
    neither = both.model_copy(update={"attribution": False, "width_rung": False})
    needed, how = disk_needed_bytes(both, both.baseline())
    plain, plain_how = disk_needed_bytes(neither, neither.baseline())
    checkpoint = CHECKPOINT_BYTES_PER_PARAM * both.baseline().param_count()
    widths = [CHECKPOINT_BYTES_PER_PARAM * r.param_count() for r in planned_width_recipes(both)]
    assert len(widths) == 12 and widths[1] == widths[3] > 4 * widths[0] > 0, (
        "twice the width and depth")
    assert needed - plain == (21 * (checkpoint + TRIAL_FILES_BYTES)
                              + sum(widths) + 12 * TRIAL_FILES_BYTES)
    assert "21 attribution checkpoint(s)" in how and "the width rung's 12 checkpoints" in how
    assert "0 attribution" in plain_how and "width" not in plain_how


FULL_DISK_CHECK = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
from recipelab.agent.setup.preflight import check_disk
from recipelab.agent.setup.settings import CampaignSettings
settings = CampaignSettings(name="c", preset="tiny", iterations=1)
result = check_disk(settings, settings.baseline(), Path(sys.argv[1]))
print(result.status, "|", result.what, "|", result.fix)
"""


def test_a_full_disk_is_an_error_with_the_fix(tmp_path: Path) -> None:
    # RLIMIT_FSIZE=0 makes every write of a byte fail as on a full disk, for root as well.
    child = subprocess.run(
        [sys.executable, "-c", FULL_DISK_CHECK, str(tmp_path / "c")], capture_output=True,
        text=True, timeout=60, check=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)))
    status, what, fix = (part.strip() for part in child.stdout.split("|"))
    assert status == "error" and "File too large" in what, child.stdout
    assert "free some space" in fix


def test_an_llm_endpoint_that_is_down_is_a_warning_in_seconds() -> None:
    settings = CampaignSettings(name="c", preset="tiny", window=WindowSettings(iterations=1),
                                proposer=ProposerSettings(llm_base_url=f"http://127.0.0.1:{closed_port()}/v1"))
    result = check_llm(settings, settings.baseline())
    assert result is not None and result.status == "warning"
    assert "sampler proposes until the LLM answers" in result.what
    assert "nothing answers" in result.what


@pytest.mark.parametrize(("reply", "status", "said"), [
    (steered(), "ok", "answered a campaign turn"),
    (text("I cannot help with recipes."), "warning", "sampler proposes until the LLM answers"),
])
def test_the_llm_probe_is_one_campaign_turn_ok_when_answered_and_a_warning_otherwise(
        reply: Reply, status: str, said: str) -> None:
    """The probe asks what the campaign's turns ask (pick one of the sampler's candidates,
    adjust it), so a model that can steer passes it; a failure is no verdict on the night."""
    server = FakeOpenAI().start()  # a real HTTP server speaking the OpenAI API
    server.default = reply
    try:
        settings = CampaignSettings(name="c", preset="tiny", window=WindowSettings(iterations=1),
                                    proposer=ProposerSettings(llm_base_url=server.base_url))
        result = check_llm(settings, settings.baseline())
    finally:
        server.stop()
    assert result is not None and result.status == status, result
    assert said in result.what
    if status == "ok":
        assert len(server.chat_requests()) == 1  # one turn asked for, no conversation


def test_no_llm_configured_means_no_llm_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECIPELAB_LLM_BASE_URL", raising=False)
    settings = CampaignSettings(name="c", preset="tiny", window=WindowSettings(iterations=1))
    assert check_llm(settings, settings.baseline()) is None


def test_the_whole_preflight_on_a_good_setup_passes_and_warms_the_cache(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    settings = CampaignSettings(name="c", preset="tiny", corpus=corpus, window=WindowSettings(iterations=1),
                                ladder=LadderSettings(stress_steps=200),  # read once
                                proposer=ProposerSettings(llm_base_url=f"http://127.0.0.1:{closed_port()}/v1"))
    report = run_preflight(resolve(settings), tmp_path / "c")
    by_name = {r.name: r for r in report.results}
    assert report.ok, report.results
    assert {"device", "disk", "memory", "guardrails", "corpus", "trial", "llm"} <= set(by_name)
    assert by_name["trial"].status == "ok" and "val_bpb" in by_name["trial"].what
    assert "analytic" in by_name["memory"].what or "fitted" in by_name["memory"].what
    # the LLM is down: a warning, and the campaign still asks it on its turns
    assert by_name["llm"].status == "warning" and "sampler proposes" in by_name["llm"].what
    assert not (tmp_path / "c").exists(), "the preflight writes nothing into the campaign"


def test_a_resumed_campaign_that_already_trained_is_not_trained_again(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    """A restart after a kill is back to work at once: the campaign's own complete trial on
    this device proves the trial path; a trial on another device, or a failed one, does not."""
    campaign = tmp_path / "c"
    campaign.mkdir()
    settings = CampaignSettings(name="c", preset="tiny", corpus=corpus, window=WindowSettings(iterations=1),
                                executor=ExecutorSettings(device="cpu"))
    def line(status: str, trial_id: str, device: str) -> str:
        return json.dumps({"kind": "proxy", "status": status, "trial_id": trial_id,
                           "provenance": {"device": device}})

    lines = [line("failed", "p0000", "cpu"), '{"torn', line("complete", "p0001", "cuda:0")]
    (campaign / "trajectory.jsonl").write_text("\n".join(lines) + "\n")
    assert proven_trial(settings, campaign) is None
    lines.append(line("complete", "p0002", "cpu"))
    (campaign / "trajectory.jsonl").write_text("\n".join(lines) + "\n")
    assert proven_trial(settings, campaign) == "p0002"
    trial = {r.name: r for r in run_preflight(resolve(settings), campaign).results}["trial"]
    assert trial.status == "ok" and "p0002" in trial.what


def write_parquet_corpus(directory: Path, total_bytes: int, files: int) -> None:
    """``total_bytes`` of random-word text in ``files`` uncompressed Parquet shards (a text
    column, FineWeb-Edu's layout), written fast by repeating one 16 MiB block of rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=n))
             for n in rng.integers(2, 10, size=2000)]
    row = 4096
    text = " ".join(rng.choice(words, size=(16 << 20) // 5))
    rows = [text[i:i + row] for i in range(0, len(text) - row, row)]
    block = pa.table({"id": pa.array(range(len(rows))), "text": pa.array(rows)})
    per_file = total_bytes // files // (len(rows) * row) + 1
    directory.mkdir(parents=True)
    for index in range(files):
        with pq.ParquetWriter(directory / f"shard-{index:03d}.parquet", block.schema,
                              compression="none", use_dictionary=False) as writer:
            for _ in range(per_file):
                writer.write_table(block)


PEAK_RSS = """
import resource, subprocess, sys
code = subprocess.run([sys.executable, "-m", "recipelab", *sys.argv[1:]]).returncode
print("PEAK_KIB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)
sys.exit(code)
"""
MEMORY_BUDGET = 1 << 30


@pytest.mark.timeout(900)  # writing 2 GiB and one tiny campaign; a loaded disk stretches it
def test_a_multi_gib_parquet_corpus_costs_the_campaign_only_what_it_reads(tmp_path: Path) -> None:
    shards = tmp_path / "fineweb"
    write_parquet_corpus(shards, total_bytes=2 * GIB, files=4)
    assert sum(p.stat().st_size for p in shards.iterdir()) > 2 * GIB

    # the preflight (which builds the tokenized cache) and the first trial, as a user runs them;
    # the peak is that of the largest process among the CLI and its trainer subprocesses
    child = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, "run", "--name", "big", "--preset", "tiny",
         "--iterations", "1", "--promote", "0", "--noise-seeds", "1", "--corpus", str(shards)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "RECIPELAB_CACHE": str(tmp_path / "cache"),
             "COLUMNS": "200"})

    assert child.returncode == 0, child.stderr[-3000:]
    peak = int(child.stdout.split("PEAK_KIB")[1].split()[0]) * 1024
    assert peak < MEMORY_BUDGET, f"peak RSS {peak / 2**20:.0f} MiB"
    settings = CampaignSettings.model_validate_json(
        (tmp_path / "campaigns" / "big" / "settings.json").read_text())
    assert settings.corpus.source == str(shards)
    assert settings.corpus.max_bytes == corpus_bytes_needed(settings)
    record = (tmp_path / "campaigns" / "big" / "trajectory.jsonl").read_text()
    assert '"status":"complete"' in record.replace(" ", "")


def test_the_preflight_trial_is_described_as_the_campaigns_trials_are(tmp_path: Path) -> None:
    from recipelab.agent.setup.preflight import check_trial

    settings = CampaignSettings(name="spec", preset="tiny", precision="fp32",
                                window=WindowSettings(iterations=3),
                                executor=ExecutorSettings(threads=1, parallel=2))
    executor = FakeExecutor()
    check_trial(settings, settings.baseline(), executor)
    (spec,) = executor.submitted
    campaign_spec = settings.trial_spec("p0000", "proxy", settings.baseline(), tmp_path,
                                        log_every=1)
    assert (spec.threads, spec.device, spec.corpus, spec.compile) == (
        campaign_spec.threads, campaign_spec.device, campaign_spec.corpus, campaign_spec.compile)
    assert spec.threads == 1
