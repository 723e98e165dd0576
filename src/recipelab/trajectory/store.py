"""The trajectory store: ``trajectory.jsonl`` is the truth, a SQL database its index.

The index is ``trajectory.sqlite`` in the campaign directory unless a database URL says
otherwise: a team can keep the index of all its campaigns in one PostgreSQL database
(``postgresql+psycopg://...``), where campaigns share one table keyed by (campaign,
trial_id) and every query of a store is confined to its own campaign.

Two files because they serve different readers. The JSONL is append-only, readable with
``grep`` and the portable artifact a user carries to the next campaign; SQLite answers
queries (``recipelab status``, the proposer's history) without re-parsing a growing file, and
can always be rebuilt from the JSONL.

The orchestrator is the only writer and may be SIGKILLed at any instant, so writes follow
one protocol:

* A terminal record is *committed* when its line, written in one ``os.write`` on an
  ``O_APPEND`` descriptor, has been fsynced. Only then is SQLite updated. A crash therefore
  leaves one of: no line (the trial never finished; its ``running`` row says so), a partial
  last line (set aside by :meth:`TrajectoryStore.reconcile`), or a committed line SQLite has
  not indexed yet (upserted by reconcile). A completed trial is never lost or duplicated.
* ``running`` rows live only in SQLite; reconcile turns the ones left behind by a crash into
  ``interrupted`` records, so the trajectory says what was in flight.
* Rows are stored as the JSONL line parses back (see ``_canonical``), so values JSON cannot
  carry exactly (NaN, infinities, tuples) never make the two files disagree.

A SQLite file that is corrupt or of another schema is set aside and rebuilt from the JSONL;
a shared PostgreSQL table is never dropped: a schema mismatch there is an error to act on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import Engine, create_engine, inspect
from sqlalchemy.exc import DatabaseError, NoSuchModuleError
from sqlmodel import Session, col, select

from recipelab.fsutil import fsync_dir
from recipelab.redaction import redact_url
from recipelab.trajectory.index_db import (
    TABLE,
    StoreError,
    add_columns,
    has_table,
    index_usable,
    memory_engine,
    reader_engine,
    replace_rows,
    server_url,
    sqlite_file,
    writer_engine,
)
from recipelab.trajectory.record import TrialRecord, TrialRow, utc_now

__all__ = ["ReconcileReport", "StoreError", "TrajectoryStore"]

_REPORT_TEXT_CHARS = 200
_PROBE_NAME = ".recipelab-write-probe"
_PROBE_BYTES = b"\0" * 4096  # a whole block, so a full disk fails the probe
POSTGRES_HINT = "pip install 'recipelab[postgres]'"
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class ReconcileReport:
    """What :meth:`TrajectoryStore.reconcile` repaired, for the agent to log and act on."""

    set_aside: list[str]
    """Bad JSONL lines moved to the side file (their text, truncated to ~200 chars)."""
    inserted: list[str]
    """trial_ids present in the JSONL but missing or stale in SQLite, now upserted."""
    interrupted: list[TrialRecord]
    """Records newly written as ``interrupted`` (``running`` rows a crash left behind)."""
    side_file: Path | None
    """Where the bad lines went, if any."""
    rebuilt: bool
    """The SQLite file was missing, corrupt or of another schema and was recreated."""


@dataclass(frozen=True)
class _Line:
    number: int  # 1-based, as an editor shows it
    text: str


@dataclass(frozen=True)
class _Scan:
    """The JSONL split into the records it holds and the lines that are not records."""

    kept: list[tuple[_Line, TrialRecord]]
    rejected: list[tuple[_Line, str]]  # the line and why it is not a record
    ends_with_newline: bool

    @property
    def records(self) -> list[TrialRecord]:
        return [record for _, record in self.kept]


class TrajectoryStore:
    """The campaign's memory: one writer (the agent), any number of ``readonly`` readers.

    Open it, call :meth:`reconcile` once (under the agent's lock) to repair what a crash left,
    then :meth:`mark_running` a trial when it starts and :meth:`append` its terminal record.
    """

    JSONL = "trajectory.jsonl"
    SQLITE = "trajectory.sqlite"
    REJECTED = "trajectory.rejected-lines.jsonl"

    def __init__(self, campaign_dir: Path, campaign: str, *, readonly: bool = False,
                 db_url: str | None = None) -> None:
        """``db_url``: None for ``trajectory.sqlite`` in ``campaign_dir``, else a SQLAlchemy
        URL of a SQLite file or a PostgreSQL database (``postgresql+psycopg://...``)."""
        self.campaign_dir = Path(campaign_dir)
        self.campaign = campaign
        self.readonly = readonly
        self.jsonl_path = self.campaign_dir / self.JSONL
        self.server_url = server_url(db_url)
        self.sqlite_path = (self.campaign_dir / self.SQLITE if db_url is None
                            else sqlite_file(db_url) if self.server_url is None else None)
        self.index_name = (str(self.sqlite_path) if self.sqlite_path is not None
                           else redact_url(str(db_url)))
        self.index_label = self.sqlite_path.name if self.sqlite_path is not None else "the database"
        self.side_path = self.campaign_dir / self.REJECTED
        self._terminal_ids: set[str] = set()
        self._needs_newline = False
        self._index_recreated = False
        if readonly:
            if not self.campaign_dir.is_dir():
                raise StoreError(f"no campaign directory at {self.campaign_dir}; check the path")
            self._engine = self._open_readonly_index()
            return
        _probe_writable(self.campaign_dir, self.jsonl_path)
        scan = self._scan()
        self._terminal_ids = {record.trial_id for record in scan.records}
        self._needs_newline = not scan.ends_with_newline
        self._engine = self._open_index()

    # -- writing -------------------------------------------------------------------------

    def reconcile(self, node_of: Callable[[TrialRecord], str | None] = lambda record: None
                  ) -> ReconcileReport:
        """Bring JSONL and SQLite back into agreement after whatever the last run left.

        A trial left running is recorded ``interrupted``, with the node ``node_of`` says it
        ran on. Idempotent: a second call right after the first reports nothing new.
        """
        self._require_writable("reconcile")
        scan = self._scan()
        side_file = self._set_aside(scan) if scan.rejected else None
        self._terminal_ids = {record.trial_id for record in scan.records}
        inserted = self._sync_index(scan.records)
        interrupted = self._interrupt_running(node_of)
        rebuilt, self._index_recreated = self._index_recreated, False
        return ReconcileReport(
            set_aside=[_clip(line.text) for line, _ in scan.rejected],
            inserted=inserted,
            interrupted=interrupted,
            side_file=side_file,
            rebuilt=rebuilt,
        )

    def mark_running(self, record: TrialRecord) -> None:
        """Record in SQLite only that a trial started, so a crash leaves evidence of it."""
        self._require_writable("mark_running")
        self._check_campaign(record)
        if record.status != "running":
            raise StoreError(
                f"mark_running got trial {record.trial_id!r} with status {record.status!r}; "
                "it takes a record whose status is 'running' (terminal ones go to append)"
            )
        self._refuse_second_terminal(record)
        self._upsert(_canonical(record), doing=f"marking trial {record.trial_id!r} running")

    def append(self, record: TrialRecord) -> None:
        """Commit a terminal record: fsync its JSONL line, then replace its SQLite row."""
        self._require_writable("append")
        self._check_campaign(record)
        if not record.is_terminal:
            raise StoreError(
                f"append got trial {record.trial_id!r} with status {record.status!r}; only "
                "terminal records are appended (use mark_running for a trial in flight)"
            )
        self._refuse_second_terminal(record)
        line = record.to_json_line()
        self._append_line(line, record.trial_id)
        self._terminal_ids.add(record.trial_id)
        self._upsert(
            TrialRecord.from_json_line(line),
            doing=f"indexing trial {record.trial_id!r}, which is committed to {self.JSONL} "
            "(the next reconcile indexes it)",
        )

    def rebuild(self) -> int:
        """Replace this campaign's rows with the JSONL's records in one transaction.

        Readers see the old index or the new one, never a missing one. ``running`` rows are
        dropped with the rest: call it between campaigns, not while trials are in flight.
        """
        self._require_writable("rebuild")
        records = self.jsonl_records()
        with self._session("rebuilding from the JSONL") as session:
            replace_rows(session, self.campaign, records)
        self._terminal_ids = {record.trial_id for record in records}
        return len(records)

    # -- reading -------------------------------------------------------------------------

    def records(self, *, kind: str | None = None, status: str | None = None) -> list[TrialRecord]:
        """Records from SQLite (``running`` ones included), ordered by (iteration, trial_id)."""
        query = self._select()
        if kind is not None:
            query = query.where(TrialRow.kind == kind)
        if status is not None:
            query = query.where(TrialRow.status == status)
        query = query.order_by(col(TrialRow.iteration), col(TrialRow.trial_id))
        with self._session("listing records") as session:
            return [row.to_record() for row in session.exec(query)]

    def get(self, trial_id: str) -> TrialRecord | None:
        with self._session(f"reading trial {trial_id!r}") as session:
            row = session.exec(self._select().where(TrialRow.trial_id == trial_id)).first()
            return None if row is None else row.to_record()

    def jsonl_records(self) -> list[TrialRecord]:
        """The records the JSONL holds, skipping (not moving) lines reconcile would set aside."""
        return self._scan().records

    def check(self) -> list[str]:
        """Human-readable disagreements between JSONL and SQLite; empty when they agree.

        Read by a live ``recipelab status``, it may briefly see a trial committed to the JSONL
        whose row is still being written.
        """
        scan = self._scan()
        problems = [
            f"{self.JSONL} line {line.number} is not a valid record ({why}); "
            "reconcile will set it aside"
            for line, why in scan.rejected
        ]
        in_jsonl = {record.trial_id: record for record in scan.records}
        with self._session("checking against the JSONL") as session:
            in_sqlite = {row.trial_id: row.to_record() for row in session.exec(self._select())}
        for trial_id, record in in_jsonl.items():
            row = in_sqlite.get(trial_id)
            if row is None:
                problems.append(f"trial {trial_id!r} is in {self.JSONL} but not in {self.index_label}")
            elif row != record:
                fields = ", ".join(_differing_fields(record, row))
                problems.append(f"trial {trial_id!r} differs between the two files in: {fields}")
        problems += [
            f"trial {trial_id!r} is {row.status!r} in {self.index_label} but absent from {self.JSONL}"
            for trial_id, row in in_sqlite.items()
            if trial_id not in in_jsonl and row.status != "running"
        ]
        return problems

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- the JSONL -----------------------------------------------------------------------

    def _scan(self) -> _Scan:
        try:
            data = self.jsonl_path.read_bytes()
        except FileNotFoundError:
            return _Scan(kept=[], rejected=[], ends_with_newline=True)
        except OSError as err:
            raise StoreError(f"cannot read {self.jsonl_path}: {err.strerror}") from err
        chunks = data.split(b"\n")
        ends_with_newline = chunks[-1] == b""
        if ends_with_newline:
            chunks.pop()
        kept: list[tuple[_Line, TrialRecord]] = []
        rejected: list[tuple[_Line, str]] = []
        seen: set[str] = set()
        for number, chunk in enumerate(chunks, start=1):
            line = _Line(number, chunk.decode("utf-8", errors="replace"))
            if not line.text.strip():
                continue  # a blank line carries nothing; not worth a side-file entry
            try:
                record = self._parse(chunk, number)
            except ValueError as err:
                rejected.append((line, _one_line(err)))
                continue
            if record.trial_id in seen:
                why = f"a second terminal record for trial {record.trial_id!r}; the first is kept"
                rejected.append((line, why))
                continue
            seen.add(record.trial_id)
            kept.append((line, record))
        return _Scan(kept=kept, rejected=rejected, ends_with_newline=ends_with_newline)

    def _parse(self, chunk: bytes, number: int) -> TrialRecord:
        """One line as a record; ``ValueError`` if it is not one, ``StoreError`` if it is
        another campaign's (moving a whole foreign trajectory aside would be a surprise)."""
        record = TrialRecord.from_json_line(chunk.decode("utf-8"))
        if record.campaign != self.campaign:
            raise StoreError(
                f"{self.jsonl_path} line {number} belongs to campaign {record.campaign!r}, not "
                f"{self.campaign!r}; open it as campaign {record.campaign!r} or give the new "
                "campaign its own directory"
            )
        if not record.is_terminal:
            raise ValueError(f"status {record.status!r} is not terminal")
        return record

    def _append_line(self, line: str, trial_id: str) -> None:
        """Write one line durably; the single ``os.write`` on ``O_APPEND`` is the commit point."""
        data = (b"\n" if self._needs_newline else b"") + line.encode("utf-8") + b"\n"
        created = not self.jsonl_path.exists()
        self._needs_newline = True  # until the write is known whole, assume a partial tail
        try:
            fd = os.open(self.jsonl_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"short write, {written} of {len(data)} bytes (disk full?)")
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.campaign_dir)
        except OSError as err:
            raise StoreError(
                f"could not commit trial {trial_id!r} to {self.jsonl_path}: {err}. Free disk "
                "space or fix permissions and restart the campaign; its reconcile settles "
                "whether the record made it"
            ) from err
        self._needs_newline = False

    def _set_aside(self, scan: _Scan) -> Path:
        """Copy the bad lines to the side file, then atomically drop them from the JSONL.

        In that order, so a crash in between leaves a line in both files, never in neither.
        """
        stamp = utc_now()
        with self.side_path.open("a", encoding="utf-8") as side:
            side.writelines(_side_entry(line, why, stamp) for line, why in scan.rejected)
            side.flush()
            os.fsync(side.fileno())
        tmp = self.jsonl_path.with_name(self.JSONL + ".tmp")
        with tmp.open("w", encoding="utf-8") as out:
            out.writelines(line.text + "\n" for line, _ in scan.kept)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.jsonl_path)
        fsync_dir(self.campaign_dir)
        self._needs_newline = False
        return self.side_path

    # -- the SQLite index ----------------------------------------------------------------

    def _open_index(self) -> Engine:
        """Open SQLite for writing; a missing, corrupt or outdated file is set aside and
        recreated empty (reconcile then fills it from the JSONL and reports ``rebuilt``)."""
        if self.sqlite_path is None:
            return self._open_server_index(create=True)
        existed = self.sqlite_path.exists()
        if existed:
            engine = writer_engine(self.sqlite_path)
            if index_usable(engine, self.sqlite_path):
                return engine
            engine.dispose()
        self._set_aside_index_files()
        engine = writer_engine(self.sqlite_path)
        try:
            TABLE.create(engine, checkfirst=True)
        except DatabaseError as err:
            raise StoreError(f"cannot create {self.sqlite_path}: {err.orig}") from err
        self._index_recreated = existed or self.jsonl_path.exists()
        return engine

    def _open_readonly_index(self) -> Engine:
        """Open SQLite read-only; without a usable file, index the JSONL in memory instead,
        so ``status`` works on a carried JSONL or a damaged index without writing a byte."""
        if self.sqlite_path is None:
            engine = self._open_server_index(create=False)
            if has_table(engine):
                return engine
            engine.dispose()
        elif self.sqlite_path.exists():
            engine = reader_engine(self.sqlite_path)
            if index_usable(engine, self.sqlite_path):
                return engine
            engine.dispose()
        engine = memory_engine()
        with Session(engine) as session, session.begin():
            replace_rows(session, self.campaign, self.jsonl_records())
        return engine

    def _open_server_index(self, *, create: bool) -> Engine:
        """Connect to the database server, creating the shared table when asked and missing.

        A table of another schema is an error, never dropped: other campaigns' rows are in it.
        """
        assert self.server_url is not None
        try:
            engine = create_engine(self.server_url, pool_pre_ping=True,
                                   connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
        except (NoSuchModuleError, ImportError) as err:
            raise StoreError(
                f"the trajectory database {self.index_name} needs the psycopg driver ({err}); "
                f"run {POSTGRES_HINT}") from None
        try:
            if create:
                TABLE.create(engine, checkfirst=True)
            with engine.connect() as connection:
                inspector = inspect(connection)
                columns = ({column["name"] for column in inspector.get_columns(TABLE.name)}
                           if inspector.has_table(TABLE.name) else None)
        except DatabaseError as err:
            engine.dispose()
            raise StoreError(
                f"cannot use the trajectory database {self.index_name}: {_one_line(err.orig)}. "
                "Check that the server is up, the database exists and the user may create "
                "tables in it (a password goes in PGPASSWORD or ~/.pgpass)") from None
        if columns is not None and columns < set(TABLE.columns.keys()):
            columns = add_columns(engine, columns)
        if columns is not None and columns != set(TABLE.columns.keys()):
            engine.dispose()
            raise StoreError(
                f"table {TABLE.name!r} in {self.index_name} has columns {sorted(columns)}, not "
                f"this version's {sorted(TABLE.columns.keys())}; it holds other campaigns' "
                "rows, so it is not replaced: point --db at another database")
        return engine

    def _set_aside_index_files(self) -> None:
        """Move a bad index and its WAL aside: a stale ``-wal`` replayed into a fresh
        database would corrupt it."""
        assert self.sqlite_path is not None
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        for suffix in ("", "-wal", "-shm"):
            name = self.sqlite_path.name
            path = self.sqlite_path.with_name(name + suffix)
            if path.exists():
                path.rename(path.with_name(f"{name}.corrupt-{stamp}{suffix}"))

    def _sync_index(self, records: list[TrialRecord]) -> list[str]:
        """Upsert what SQLite lacks or holds differently; delete what the JSONL does not hold
        (except ``running`` rows, which :meth:`_interrupt_running` settles)."""
        by_id = {record.trial_id: record for record in records}
        with self._session("reconciling with the JSONL") as session:
            rows = {row.trial_id: row for row in session.exec(self._select())}
            stale = [
                record for record in records
                if record.trial_id not in rows or rows[record.trial_id].to_record() != record
            ]
            for record in stale:
                session.merge(record.to_row())
            for trial_id, row in rows.items():
                if trial_id not in by_id and row.status != "running":
                    session.delete(row)
        return [record.trial_id for record in stale]

    def _interrupt_running(self, node_of: Callable[[TrialRecord], str | None]
                           ) -> list[TrialRecord]:
        interrupted = []
        for running in self.records(status="running"):
            node = node_of(running)
            metrics = running.metrics if node is None else {**running.metrics, "node": node}
            record = running.model_copy(
                update={"status": "interrupted", "reason": None, "finished_at": utc_now(),
                        "metrics": metrics}
            )
            self.append(record)
            interrupted.append(record)
        return interrupted

    def _upsert(self, record: TrialRecord, *, doing: str) -> None:
        with self._session(doing) as session:
            session.merge(record.to_row())

    def _select(self) -> Any:
        """A query of this campaign's rows (a database may hold other campaigns')."""
        return select(TrialRow).where(TrialRow.campaign == self.campaign)

    @contextmanager
    def _session(self, doing: str) -> Iterator[Session]:
        """One transaction; a database failure becomes a StoreError saying what was going on."""
        try:
            with Session(self._engine) as session, session.begin():
                yield session
        except DatabaseError as err:
            raise StoreError(
                f"{self.index_name} failed while {doing}: {_one_line(err.orig)}. The JSONL is "
                "intact; restart the campaign so reconcile can rebuild the index"
            ) from err

    # -- guards --------------------------------------------------------------------------

    def _require_writable(self, operation: str) -> None:
        if self.readonly:
            raise StoreError(
                f"{operation} needs a writable store, but {self.campaign_dir} was opened "
                "readonly=True; only the agent running the campaign writes its trajectory"
            )

    def _check_campaign(self, record: TrialRecord) -> None:
        if record.campaign != self.campaign:
            raise StoreError(
                f"trial {record.trial_id!r} belongs to campaign {record.campaign!r}, but this "
                f"store holds campaign {self.campaign!r}"
            )

    def _refuse_second_terminal(self, record: TrialRecord) -> None:
        if record.trial_id in self._terminal_ids:
            raise StoreError(
                f"trial {record.trial_id!r} already has a terminal record in {self.jsonl_path}; "
                "a trajectory never holds two. Re-run a candidate under a new trial_id with "
                f"retry_of={record.trial_id!r}"
            )


def _probe_writable(directory: Path, jsonl: Path) -> None:
    """Fail at open, not after a night of training, if the directory cannot take a record."""
    probe = directory / f"{_PROBE_NAME}-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        try:
            with probe.open("wb") as handle:
                handle.write(_PROBE_BYTES)
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            probe.unlink(missing_ok=True)
        if jsonl.exists():
            os.close(os.open(jsonl, os.O_WRONLY | os.O_APPEND))
    except OSError as err:
        raise StoreError(
            f"campaign directory {directory} is not writable ({err.strerror or err}: "
            f"{err.filename or directory}); no trial could be recorded. Fix its permissions or "
            "free disk space, or pick another directory, before starting the campaign"
        ) from err


def _canonical(record: TrialRecord) -> TrialRecord:
    """The record as its JSONL line parses back (NaN and infinities become None, and so on)."""
    return TrialRecord.from_json_line(record.to_json_line())


def _side_entry(line: _Line, why: str, stamp: str) -> str:
    """One side-file line: the bad text verbatim, plus where it was and why it went."""
    entry = {"set_aside_at": stamp, "line": line.number, "reason": why, "text": line.text}
    return json.dumps(entry, ensure_ascii=False) + "\n"


def _differing_fields(a: TrialRecord, b: TrialRecord) -> list[str]:
    return [name for name in TrialRecord.model_fields if getattr(a, name) != getattr(b, name)]


def _one_line(err: object) -> str:
    return _clip(" ".join(str(err).split()))


def _clip(text: str) -> str:
    return text if len(text) <= _REPORT_TEXT_CHARS else text[:_REPORT_TEXT_CHARS] + "…"
