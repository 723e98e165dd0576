"""The trajectory store keeps JSONL and its index in agreement through crashes and damage.

A conformance suite: every specification that is not about the SQLite file itself runs on
both index backends, SQLite in the campaign directory and a real PostgreSQL server."""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import re
import signal
import sqlite3
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from recipelab.trajectory import ReconcileReport, StoreError, TrajectoryStore, TrialRecord

CAMPAIGN = "c1"


def make(trial_id: str, status: str = "complete", **fields: Any) -> TrialRecord:
    """A record; a fixed ``created_at`` so two calls with the same arguments are equal."""
    defaults = {"campaign": CAMPAIGN, "created_at": "2025-01-01T00:00:00.000+00:00"}
    return TrialRecord.model_validate(
        {**defaults, "trial_id": trial_id, "status": status, **fields}
    )


def jsonl_lines(campaign_dir: Path) -> list[str]:
    return (campaign_dir / TrajectoryStore.JSONL).read_text().splitlines()


StoreOpener = Callable[..., TrajectoryStore]
RowDeleter = Callable[[Path, str], None]


@pytest.fixture
def campaign_dir(tmp_path: Path) -> Path:
    return tmp_path / "campaign"


@pytest.fixture
def open_store(db_url: str | None) -> StoreOpener:
    """``TrajectoryStore`` on the index backend under test (SQLite, then PostgreSQL)."""
    return functools.partial(TrajectoryStore, db_url=db_url)


@pytest.fixture
def delete_row(db_url: str | None) -> RowDeleter:
    """Damage the index behind the store's back: drop one row."""
    def delete(campaign_dir: Path, trial_id: str) -> None:
        if db_url is None:
            with sqlite3.connect(campaign_dir / TrajectoryStore.SQLITE) as db:
                db.execute("DELETE FROM trials WHERE trial_id = ?", (trial_id,))
            db.close()
            return
        engine = create_engine(db_url)
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM trials WHERE campaign = :c AND trial_id = :t"),
                               {"c": CAMPAIGN, "t": trial_id})
        engine.dispose()

    return delete


@pytest.fixture
def store(campaign_dir: Path, open_store: StoreOpener) -> Iterator[TrajectoryStore]:
    with open_store(campaign_dir, CAMPAIGN) as opened:
        opened.reconcile()
        yield opened


def test_appended_record_is_listed_written_once_and_equal_in_both_files(
    store: TrajectoryStore, campaign_dir: Path
) -> None:
    record = make(
        "t1",
        iteration=3,
        val_bpb=1.2345678901234567,
        recipe={"shape": {"n_layer": 4}, "optimizer": {"lr": 0.003}},
        metrics={"tokens_per_s": 12_345.5, "nested": [1, 2.5, None, "x"]},
        curve=[{"step": 0, "loss": 5.5}, {"step": 59, "loss": 2.25}],
        reasons=["fine"],
    )
    store.append(record)

    assert store.records() == [record]
    assert len(jsonl_lines(campaign_dir)) == 1
    assert store.get("t1") == store.jsonl_records()[0] == record
    assert store.check() == []


def test_second_terminal_record_for_a_trial_raises_and_writes_nothing(
    open_store: StoreOpener, store: TrajectoryStore, campaign_dir: Path
) -> None:
    store.append(make("t1", val_bpb=1.5))
    before = (campaign_dir / TrajectoryStore.JSONL).read_bytes()

    with pytest.raises(StoreError, match="t1"):
        store.append(make("t1", status="failed", reason="nan"))
    with open_store(campaign_dir, CAMPAIGN) as reopened, pytest.raises(StoreError):
        reopened.append(make("t1", status="failed", reason="nan"))

    assert (campaign_dir / TrajectoryStore.JSONL).read_bytes() == before
    assert store.records() == [make("t1", val_bpb=1.5)]


def test_running_trial_left_by_a_crash_is_interrupted_once_in_both_files(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    with open_store(campaign_dir, CAMPAIGN) as crashed:
        crashed.reconcile()
        crashed.mark_running(make("t1", status="running", started_at="2025-01-01T00:00:00"))

    with open_store(campaign_dir, CAMPAIGN) as store:
        report = store.reconcile()
        [interrupted] = report.interrupted
        assert (interrupted.trial_id, interrupted.status, interrupted.reason) == (
            "t1",
            "interrupted",
            None,
        )
        assert interrupted.finished_at is not None
        assert interrupted.started_at == "2025-01-01T00:00:00"
        assert store.jsonl_records() == [interrupted]
        assert store.get("t1") == interrupted
        assert store.reconcile().interrupted == []

    with open_store(campaign_dir, CAMPAIGN) as later:
        assert later.reconcile().interrupted == []
        assert len(jsonl_lines(campaign_dir)) == 1


def test_a_trial_left_running_is_interrupted_on_the_node_it_was_training_on(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    """The orchestrator that launched it died before it heard the loss: the node comes from
    what the campaign kept of it (``node_of``), and a trial without one names none."""
    with open_store(campaign_dir, CAMPAIGN) as crashed:
        crashed.reconcile()
        crashed.mark_running(make("t1", status="running"))
        crashed.mark_running(make("t2", status="running"))

    nodes = {"t1": "vm/e0e6b21b"}
    with open_store(campaign_dir, CAMPAIGN) as store:
        report = store.reconcile(node_of=lambda record: nodes.get(record.trial_id))
        by_id = {r.trial_id: r for r in report.interrupted}
        assert by_id["t1"].measured.node == "vm/e0e6b21b"
        assert by_id["t2"].measured.node is None
        assert store.get("t1") == by_id["t1"]


def test_truncated_last_line_is_set_aside_and_appends_continue_on_their_own_line(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    with open_store(campaign_dir, CAMPAIGN) as store:
        store.append(make("t1"))
    half = make("t2").to_json_line()[:40]
    with (campaign_dir / TrajectoryStore.JSONL).open("a") as jsonl:
        jsonl.write(half)

    with open_store(campaign_dir, CAMPAIGN) as store:
        report = store.reconcile()
        assert report.set_aside == [half]
        assert report.side_file == campaign_dir / TrajectoryStore.REJECTED
        [entry] = [json.loads(line) for line in report.side_file.read_text().splitlines()]
        assert entry["text"] == half
        assert entry["line"] == 2
        assert jsonl_lines(campaign_dir) == [make("t1").to_json_line()]

        store.append(make("t2"))
        assert [r.trial_id for r in store.jsonl_records()] == ["t1", "t2"]
        assert store.check() == []


def test_append_after_a_partial_tail_starts_its_own_line_even_before_reconcile(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    with open_store(campaign_dir, CAMPAIGN) as store:
        store.append(make("t1"))
    with (campaign_dir / TrajectoryStore.JSONL).open("a") as jsonl:
        jsonl.write('{"campaign": "c1", "tri')

    with open_store(campaign_dir, CAMPAIGN) as store:
        store.append(make("t2"))
    assert jsonl_lines(campaign_dir)[2] == make("t2").to_json_line()

    with open_store(campaign_dir, CAMPAIGN) as store:
        assert len(store.reconcile().set_aside) == 1
        assert [r.trial_id for r in store.records()] == ["t1", "t2"]


def test_corrupt_line_in_the_middle_is_set_aside(open_store: StoreOpener, campaign_dir: Path) -> None:
    lines = [make("t1").to_json_line(), "not json at all", make("t2").to_json_line()]
    campaign_dir.mkdir()
    (campaign_dir / TrajectoryStore.JSONL).write_text("\n".join(lines) + "\n")

    with open_store(campaign_dir, CAMPAIGN) as store:
        report = store.reconcile()
        assert report.set_aside == ["not json at all"]
        assert jsonl_lines(campaign_dir) == [lines[0], lines[2]]
        assert [r.trial_id for r in store.records()] == ["t1", "t2"]


def test_duplicate_terminal_record_in_the_jsonl_keeps_the_first(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    first, second = make("t1", val_bpb=1.0), make("t1", status="failed", reason="oom")
    campaign_dir.mkdir()
    (campaign_dir / TrajectoryStore.JSONL).write_text(
        f"{first.to_json_line()}\n{second.to_json_line()}\n"
    )

    with open_store(campaign_dir, CAMPAIGN) as store:
        [clipped] = store.reconcile().set_aside
        assert second.to_json_line().startswith(clipped.removesuffix("…"))
        assert store.records() == store.jsonl_records() == [first]
    [entry] = (campaign_dir / TrajectoryStore.REJECTED).read_text().splitlines()
    assert json.loads(entry)["text"] == second.to_json_line()


def test_non_terminal_record_in_the_jsonl_is_set_aside(open_store: StoreOpener, campaign_dir: Path) -> None:
    campaign_dir.mkdir()
    (campaign_dir / TrajectoryStore.JSONL).write_text(make("t1", "running").to_json_line() + "\n")

    with open_store(campaign_dir, CAMPAIGN) as store:
        assert len(store.reconcile().set_aside) == 1
        assert store.records() == []


def test_jsonl_of_another_campaign_is_refused_rather_than_moved(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    campaign_dir.mkdir()
    foreign = make("t1").model_copy(update={"campaign": "other"})
    (campaign_dir / TrajectoryStore.JSONL).write_text(foreign.to_json_line() + "\n")

    with pytest.raises(StoreError, match="'other'"):
        open_store(campaign_dir, CAMPAIGN)
    assert jsonl_lines(campaign_dir) == [foreign.to_json_line()]


def test_deleted_sqlite_is_rebuilt_from_the_jsonl(campaign_dir: Path) -> None:
    with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
        store.append(make("t1", iteration=1))
        store.append(make("t2", iteration=2, status="failed", reason="oom"))
        expected = store.records()
    (campaign_dir / TrajectoryStore.SQLITE).unlink()

    with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
        report = store.reconcile()
        assert report.rebuilt
        assert store.records() == expected
        assert store.check() == []


def test_garbage_sqlite_is_moved_aside_and_rebuilt(campaign_dir: Path) -> None:
    with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
        store.append(make("t1"))
    (campaign_dir / TrajectoryStore.SQLITE).write_bytes(b"\x13garbage" * 4096)

    with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
        report = store.reconcile()
        assert report.rebuilt
        assert report.inserted == ["t1"]
        assert store.records() == [make("t1")]
    [moved] = campaign_dir.glob(f"{TrajectoryStore.SQLITE}.corrupt-*")
    assert moved.read_bytes().startswith(b"\x13garbage")


def test_sqlite_of_an_older_schema_is_moved_aside_and_rebuilt(campaign_dir: Path) -> None:
    with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
        store.append(make("t1"))
    with sqlite3.connect(campaign_dir / TrajectoryStore.SQLITE) as db:
        db.execute("DROP TABLE trials")
        db.execute("CREATE TABLE trials (campaign TEXT, trial_id TEXT)")
    db.close()

    with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
        assert store.reconcile().rebuilt
        assert store.records() == [make("t1")]


def test_brand_new_campaign_reconciles_to_an_empty_report(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    with open_store(campaign_dir, CAMPAIGN) as store:
        empty = store.reconcile()
    assert empty == store.reconcile() == ReconcileReport([], [], [], None, rebuilt=False)


def test_jsonl_record_missing_from_sqlite_is_inserted_by_reconcile(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    with open_store(campaign_dir, CAMPAIGN) as store:
        store.append(make("t1"))
    with (campaign_dir / TrajectoryStore.JSONL).open("a") as jsonl:
        jsonl.write(make("t2", val_bpb=0.9).to_json_line() + "\n")

    with open_store(campaign_dir, CAMPAIGN) as store:
        assert store.reconcile().inserted == ["t2"]
        assert store.get("t2") == make("t2", val_bpb=0.9)


def test_check_is_empty_when_the_files_agree_and_names_the_trial_when_not(
    delete_row: RowDeleter, store: TrajectoryStore, campaign_dir: Path
) -> None:
    store.append(make("t1"))
    store.append(make("t2"))
    assert store.check() == []

    delete_row(campaign_dir, "t2")

    [problem] = store.check()
    assert "'t2'" in problem


def test_terminal_row_absent_from_the_jsonl_is_reported_then_removed(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    with open_store(campaign_dir, CAMPAIGN) as store:
        store.append(make("t1"))
        store.append(make("t2"))
    (campaign_dir / TrajectoryStore.JSONL).write_text(make("t1").to_json_line() + "\n")

    with open_store(campaign_dir, CAMPAIGN) as store:
        [problem] = store.check()
        assert "'t2'" in problem
        store.reconcile()
        assert store.check() == []
        assert [r.trial_id for r in store.records()] == ["t1"]


def test_rebuild_returns_the_row_count_and_makes_check_empty(
    delete_row: RowDeleter, store: TrajectoryStore, campaign_dir: Path
) -> None:
    for trial_id in ("t1", "t2", "t3"):
        store.append(make(trial_id))
    delete_row(campaign_dir, "t1")
    assert store.check() != []

    assert store.rebuild() == 3
    assert store.check() == []


def test_records_filter_by_kind_and_status_in_iteration_then_id_order(
    store: TrajectoryStore,
) -> None:
    store.append(make("b", iteration=2))
    store.append(make("a", iteration=2, kind="stress"))
    store.append(make("z", iteration=1, status="failed", reason="nan"))
    store.mark_running(make("r", status="running", iteration=3))

    assert [r.trial_id for r in store.records()] == ["z", "a", "b", "r"]
    assert [r.trial_id for r in store.records(kind="stress")] == ["a"]
    assert [r.trial_id for r in store.records(status="complete")] == ["a", "b"]
    assert store.get("missing") is None


def test_values_json_cannot_carry_are_stored_as_the_jsonl_reads_them(
    store: TrajectoryStore,
) -> None:
    store.append(make("t1", val_bpb=float("nan"), metrics={"peak": float("inf")}))

    assert store.get("t1") == store.jsonl_records()[0]
    assert store.check() == []


def test_mark_running_and_append_refuse_the_wrong_status_or_campaign(
    store: TrajectoryStore,
) -> None:
    with pytest.raises(StoreError, match="running"):
        store.mark_running(make("t1"))
    with pytest.raises(StoreError, match="terminal"):
        store.append(make("t1", status="running"))
    with pytest.raises(StoreError, match="'other'"):
        store.append(make("t1").model_copy(update={"campaign": "other"}))
    store.append(make("t1"))
    with pytest.raises(StoreError, match="t1"):
        store.mark_running(make("t1", status="running"))


def test_readonly_store_reads_while_the_writer_is_open_and_refuses_to_write(
    open_store: StoreOpener, store: TrajectoryStore, campaign_dir: Path
) -> None:
    store.append(make("t1"))
    with open_store(campaign_dir, CAMPAIGN, readonly=True) as reader:
        store.append(make("t2"))
        assert [r.trial_id for r in reader.records()] == ["t1", "t2"]
        assert reader.check() == []
        with pytest.raises(StoreError, match="readonly"):
            reader.append(make("t3"))
        with pytest.raises(StoreError, match="readonly"):
            reader.reconcile()


def test_readonly_store_without_sqlite_indexes_the_jsonl_without_writing(
    open_store: StoreOpener, campaign_dir: Path,
) -> None:
    campaign_dir.mkdir()
    (campaign_dir / TrajectoryStore.JSONL).write_text(make("t1").to_json_line() + "\n")

    with open_store(campaign_dir, CAMPAIGN, readonly=True) as reader:
        assert reader.records() == [make("t1")]
    assert sorted(p.name for p in campaign_dir.iterdir()) == [TrajectoryStore.JSONL]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_campaign_dir_fails_at_open_naming_the_directory(tmp_path: Path) -> None:
    campaign_dir = tmp_path / "campaign"
    campaign_dir.mkdir()
    campaign_dir.chmod(0o555)
    try:
        with pytest.raises(StoreError, match=re.escape(str(campaign_dir))):
            TrajectoryStore(campaign_dir, CAMPAIGN)
    finally:
        campaign_dir.chmod(0o755)


FULL_DISK_CHILD = """
import resource, signal, sys
from pathlib import Path
from recipelab.trajectory import StoreError, TrajectoryStore
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so an oversize write fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
try:
    TrajectoryStore(Path(sys.argv[1]), "c1")
except StoreError as err:
    print(err)
    sys.exit(3)
"""


def test_full_disk_fails_at_open_naming_the_directory(campaign_dir: Path) -> None:
    # Runs as root too (root ignores chmod, so the test above skips there): RLIMIT_FSIZE=0 makes
    # every write of a byte fail with EFBIG, which is how a full disk looks to the probe.
    campaign_dir.mkdir()
    child = subprocess.run(
        [sys.executable, "-c", FULL_DISK_CHILD, str(campaign_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 3, child.stderr
    assert str(campaign_dir) in child.stdout
    assert list(campaign_dir.iterdir()) == []


def test_campaign_dir_that_cannot_be_created_fails_at_open(tmp_path: Path) -> None:
    # Another root-proof way to an unwritable directory: its parent is a regular file.
    (tmp_path / "file").write_text("")
    campaign_dir = tmp_path / "file" / "campaign"
    with pytest.raises(StoreError, match=re.escape(str(campaign_dir))):
        TrajectoryStore(campaign_dir, CAMPAIGN)


trial_ids = st.lists(
    st.text(alphabet=string.ascii_letters + string.digits + "-_é", min_size=1, max_size=10),
    unique=True,
    max_size=6,
)
json_values = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)


@settings(max_examples=20, deadline=None)
@given(ids=trial_ids, data=st.data())
def test_any_appends_with_a_truncated_tail_reconcile_to_agreement_losing_no_whole_line(
    ids: list[str], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        campaign_dir = Path(tmp)
        with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
            for iteration, trial_id in enumerate(ids):
                metrics = data.draw(st.dictionaries(st.text(max_size=4), json_values, max_size=3))
                store.append(
                    make(trial_id, iteration=iteration, val_bpb=data.draw(st.floats()),
                         metrics=metrics)
                )
        jsonl = campaign_dir / TrajectoryStore.JSONL
        raw = jsonl.read_bytes() if ids else b""
        keep = data.draw(st.integers(min_value=0, max_value=len(raw)))
        if ids:
            jsonl.write_bytes(raw[:keep])
        # Byte offsets just past each line's newline; a line is whole if its text survived.
        ends = list(itertools.accumulate(len(line) + 1 for line in raw.split(b"\n")[:-1]))
        whole = sum(1 for end in ends if end - 1 <= keep)
        partial = keep > (ends[whole - 1] if whole else 0)
        expected = ids[:whole]

        with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
            report = store.reconcile()
            assert [r.trial_id for r in store.jsonl_records()] == expected
            assert sorted(r.trial_id for r in store.records()) == sorted(expected)
            assert store.check() == []
            assert len(report.set_aside) == int(partial)
            store.append(make("after"))
            assert store.check() == []


SIGKILL_CHILD = """
import sys
from pathlib import Path
from recipelab.trajectory import TrajectoryStore, TrialRecord
store = TrajectoryStore(Path(sys.argv[1]), "c1")
store.reconcile()
print("ready", flush=True)
for i in range(1_000_000):
    trial_id = f"{sys.argv[2]}-{i}"
    store.mark_running(TrialRecord(campaign="c1", trial_id=trial_id, iteration=i, status="running"))
    store.append(TrialRecord(campaign="c1", trial_id=trial_id, iteration=i, status="complete",
                             val_bpb=1.0 / (i + 1), metrics={"i": i}))
    print("appended", trial_id, flush=True)
"""


def run_until_killed(campaign_dir: Path, prefix: str, out: Path, delay: float) -> list[str]:
    """Start a writer, SIGKILL it ``delay`` seconds after it is ready, return what it appended."""
    with out.open("w") as sink:
        child = subprocess.Popen(
            [sys.executable, "-c", SIGKILL_CHILD, str(campaign_dir), prefix],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(600):  # a bound on a hung start-up, not a timing assertion
            if "ready" in out.read_text() or child.poll() is not None:
                break
            time.sleep(0.05)
        assert child.poll() is None, out.read_text()
        time.sleep(delay)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # A kill can land inside the write of a line; only whole lines name a trial it appended.
    return re.findall(r"^appended (\S+)\n", out.read_text(), flags=re.MULTILINE)


def test_sigkilled_writer_loses_and_duplicates_no_completed_trial(tmp_path: Path) -> None:
    campaign_dir = tmp_path / "campaign"
    rng = random.Random(20250101)
    appended: list[str] = []
    for round_ in range(5):
        out = tmp_path / f"child-{round_}.out"
        appended += run_until_killed(campaign_dir, f"r{round_}", out, rng.uniform(0.0, 0.25))

        with TrajectoryStore(campaign_dir, CAMPAIGN) as store:
            store.reconcile()
            ids = [json.loads(line)["trial_id"] for line in jsonl_lines(campaign_dir)]
            assert len(ids) == len(set(ids))
            assert store.check() == []
            assert store.records(status="running") == []
            complete = {r.trial_id for r in store.records(status="complete")}
            assert set(appended) <= complete
    assert appended, "no round got as far as an append; the kill delays are too short"


def test_attribution_runs_and_results_are_stored_filtered_and_rebuilt(
    delete_row: RowDeleter, store: TrajectoryStore, campaign_dir: Path
) -> None:
    run = make("a0000", kind="attribution", parent="p0003", edit={"optimizer.lr": 0.003},
               val_bpb=2.0)
    result = make("m0000", kind="attribution-result", parent="p0003",
                  edit={"optimizer.lr": 0.003},
                  metrics={"attribution": {"groups": [{"group": "learning rate", "kept": True,
                                                        "contribution": 0.13, "low": 0.12,
                                                        "high": 0.14}]}})
    store.append(run)
    store.append(result)
    assert store.records(kind="attribution-result") == [result]
    assert store.records(kind="attribution") == [run]
    delete_row(campaign_dir, "m0000")
    assert store.rebuild() == 2
    assert store.records() == store.jsonl_records() and store.get("m0000") == result
