"""MLflow tracking: one run of an MLflow store, written to by explicit run id.

The optional extra ``recipelab[mlflow]`` provides MLflow; nothing here imports it before a
run is started, so recipelab works (and ``recipelab status`` stays quick) without it. Every
call goes through :class:`mlflow.tracking.MlflowClient` with the run's id, never MLflow's
global "active run", so a campaign can keep its parent run open while it logs one child run
per trial, and a long run can reopen its run after a restart (``run_id=``).

Whatever goes wrong in talking to the store (MLflow missing, a bad URI, a server that is
down, a database that cannot be written) is raised as :class:`TrackingUnavailable`, whose
message says what to do, with the URI's credentials redacted. Callers that must never stop
for tracking (a trial, a long run) catch that one exception.

The file ``mlflow-run-uri.txt`` (:data:`RUN_URI_FILE`) written beside a run's outputs holds
:meth:`MlflowRun.run_uri`: the tracking URI (credentials redacted) and the run's place in it,
enough to find the run again in the UI and, through :func:`read_run_id`, to reopen it.

Stores: ``file:`` URIs (or a plain directory), ``sqlite:///`` and other SQLAlchemy database
URIs, and ``http(s)://`` tracking servers (``databricks`` too). MLflow 3 refuses the file
store unless ``MLFLOW_ALLOW_FILE_STORE`` is set; a ``file:`` URI given to recipelab is that
choice made explicitly, so recipelab sets it (unless the user set it already). For an HTTP
server, MLflow's own retry policy would retry a server that is down for minutes while a
campaign waits; recipelab sets shorter defaults (``MLFLOW_HTTP_REQUEST_MAX_RETRIES=2``,
``MLFLOW_HTTP_REQUEST_TIMEOUT=15``) unless the user set them.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from recipelab.errors import RecipelabError
from recipelab.redaction import redact_text, redact_url, url_secrets

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

RUN_URI_FILE = "mlflow-run-uri.txt"
INSTALL_HINT = "pip install 'recipelab[mlflow]'"
DATABASE_SCHEMES = frozenset({"sqlite", "postgresql", "mysql", "mssql"})
SERVER_SCHEMES = frozenset({"http", "https", "databricks"})
# MLflow's limits (mlflow.utils.validation): longer values and bigger batches are refused.
MAX_KEY_CHARS = 250
MAX_PARAM_VALUE_CHARS = 6000
MAX_TAG_VALUE_CHARS = 8000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}
ARTIFACTS_BESIDE_DATABASE = "mlartifacts"
_RUN_IN_URI = re.compile(r"#/experiments/([^/\s]+)/runs/([^/\s]+)\s*$")

Status = Literal["FINISHED", "FAILED", "KILLED"]
T = TypeVar("T")


class TrackingUnavailable(RecipelabError):
    """MLflow cannot be used: it is not installed, the URI is not one it serves, or the store
    did not answer. The message names the URI (credentials redacted) and what to do."""


class RunNotFound(TrackingUnavailable):
    """The run to reopen is not in the store (deleted, or logged to another store)."""


def _mlflow_client(tracking_uri: str) -> MlflowClient:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise TrackingUnavailable(
            f"MLflow tracking ({redact_url(tracking_uri)}) needs the mlflow package, which is "
            f"not installed: {INSTALL_HINT}, or leave out --mlflow-uri") from None
    return MlflowClient(tracking_uri=tracking_uri)


def check_tracking_uri(uri: str) -> str:
    """``uri`` as recipelab passes it to MLflow, checked without contacting the store: a
    plain path becomes an absolute ``file:`` URI and a relative SQLite file an absolute one
    (a campaign resumed from another directory must find the same store). Raises
    :class:`TrackingUnavailable` for a scheme MLflow does not serve or when MLflow is missing."""
    uri = uri.strip()
    scheme = ("databricks" if uri == "databricks"
              else urllib.parse.urlsplit(uri).scheme.lower() if "://" in uri or uri.startswith("file:")
              else "")
    if not scheme:
        uri = Path(uri).expanduser().resolve().as_uri()
        scheme = "file"
    base_scheme = scheme.split("+", 1)[0]  # postgresql+psycopg, mysql+pymysql
    if scheme == "sqlite" and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        path = uri.removeprefix("sqlite:///")
        if path and path != ":memory:":
            uri = "sqlite:///" + str(Path(path).expanduser().resolve())
    if scheme != "file" and base_scheme not in DATABASE_SCHEMES | SERVER_SCHEMES:
        raise TrackingUnavailable(
            f"--mlflow-uri {redact_url(uri)!r} is not an MLflow tracking URI: give a tracking "
            "server (http://HOST:5000), a database (sqlite:///PATH/mlflow.db) or a directory "
            "(file:///PATH/mlruns)")
    try:
        import mlflow.tracking  # noqa: F401  (whether it is there, before anything runs)
    except ImportError:
        raise TrackingUnavailable(
            f"--mlflow-uri {redact_url(uri)} needs the mlflow package, which is not installed: "
            f"{INSTALL_HINT}, or leave out --mlflow-uri") from None
    if scheme == "file":
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    if base_scheme in ("http", "https"):
        for name, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
    return uri


class RunLocation(NamedTuple):
    """Where a run is, as read back from :data:`RUN_URI_FILE`."""

    tracking_uri: str  # credentials redacted
    experiment_id: str
    run_id: str


def run_uri(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's URI: its tracking URI (credentials redacted) and ``#/experiments/E/runs/R``,
    which for a tracking server is the run's page in the MLflow UI."""
    shown = redact_url(tracking_uri)
    base = shown.rstrip("/") + "/" if shown.split(":", 1)[0] in ("http", "https") else shown
    return f"{base}#/experiments/{experiment_id}/runs/{run_id}"


def parse_run_uri(text: str) -> RunLocation | None:
    """The location in a :func:`run_uri`, or None when ``text`` is not one."""
    match = _RUN_IN_URI.search(text.strip())
    if match is None:
        return None
    base = text.strip()[:match.start()]
    if base.split(":", 1)[0] in ("http", "https"):
        base = base.rstrip("/")
    return RunLocation(base, match.group(1), match.group(2))


def read_run_location(directory: Path) -> RunLocation | None:
    """The run written in ``directory``'s :data:`RUN_URI_FILE`, if there is one."""
    try:
        text = (directory / RUN_URI_FILE).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    return parse_run_uri(text)


def read_run_id(directory: Path) -> str | None:
    """The run id in ``directory``'s :data:`RUN_URI_FILE`, if any: the run to reopen."""
    location = read_run_location(directory)
    return location.run_id if location else None


def write_run_uri(directory: Path, run: MlflowRun) -> Path:
    """Write ``run``'s URI to ``directory``/:data:`RUN_URI_FILE` (atomically: a crash leaves
    the old file or the new one), and return the file's path."""
    path = directory / RUN_URI_FILE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(run.run_uri() + "\n", encoding="utf-8")
    partial.replace(path)
    return path


def flatten_params(params: Mapping[str, object], prefix: str = "") -> dict[str, str]:
    """Nested mappings flattened to dotted keys (``{"optimizer": {"lr": 3e-3}}`` gives
    ``optimizer.lr``), values as MLflow shows them: strings as they are, everything else as
    JSON, cut to MLflow's length limit."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_params(value, f"{name}."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        flat[_clip(name, MAX_KEY_CHARS)] = _clip(text, MAX_PARAM_VALUE_CHARS)
    return flat


def finite_metrics(metrics: Mapping[str, float | int | None]) -> dict[str, float]:
    """The metrics MLflow can store: None and NaN/inf left out."""
    return {_clip(name, MAX_KEY_CHARS): float(value) for name, value in metrics.items()
            if value is not None and math.isfinite(float(value))}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


@dataclass
class MlflowRun:
    """One MLflow run, open for logging. :meth:`start` creates it (or reopens one)."""

    client: MlflowClient
    tracking_uri: str
    experiment_id: str
    run_id: str

    @classmethod
    def start(cls, tracking_uri: str, experiment: str, run_name: str, *,
              parent: MlflowRun | None = None, tags: Mapping[str, str] | None = None,
              run_id: str | None = None) -> MlflowRun:
        """A new run named ``run_name`` in ``experiment`` (created when missing), or a child
        of ``parent`` in the parent's experiment; or, with ``run_id``, that run reopened
        (marked running again, its name and history kept), for a resume."""
        tracking_uri = check_tracking_uri(tracking_uri)
        shown = redact_url(tracking_uri)
        client = _mlflow_client(tracking_uri)
        try:
            if run_id is not None:
                found = _existing_run(client, shown, run_id)
                client.update_run(run_id, status="RUNNING")
                if tags:
                    client.log_batch(run_id, tags=_tags(tags))
                return cls(client, tracking_uri, found.info.experiment_id, run_id)
            experiment_id = (parent.experiment_id if parent is not None  # always beside it
                             else _experiment_id(client, tracking_uri, experiment))
            all_tags = dict(tags or {})
            if parent is not None:
                all_tags["mlflow.parentRunId"] = parent.run_id
            created = client.create_run(experiment_id, run_name=run_name,
                                        tags={k: _clip(v, MAX_TAG_VALUE_CHARS)
                                              for k, v in all_tags.items()})
            return cls(client, tracking_uri, experiment_id, created.info.run_id)
        except TrackingUnavailable:
            raise
        except Exception as error:
            what = f"reopen run {run_id}" if run_id else f"start a run in experiment {experiment!r}"
            raise _unavailable(tracking_uri, what, error) from error

    def run_uri(self) -> str:
        """What :data:`RUN_URI_FILE` holds (see :func:`run_uri`)."""
        return run_uri(self.tracking_uri, self.experiment_id, self.run_id)

    def log_params(self, params: Mapping[str, object]) -> None:
        """Log ``params``, nested mappings flattened with dots, in batches MLflow accepts.
        A param already logged may be logged again only with the same value (MLflow's rule)."""
        items = [_param(k, v) for k, v in flatten_params(params).items()]
        for chunk in _chunks(items, MAX_PARAMS_TAGS_PER_BATCH):
            self._call("log params", lambda c=chunk: self.client.log_batch(self.run_id, params=c))

    def log_metrics(self, metrics: Mapping[str, float | int | None], step: int) -> None:
        """Log ``metrics`` at ``step`` in one batch; None and non-finite values are skipped."""
        self.log_history({name: [(step, value)] for name, value in metrics.items()})

    def log_history(self, history: Mapping[str, Sequence[tuple[int, float | int | None]]]) -> None:
        """Log whole series at once (a trial's curve): ``{name: [(step, value), ...]}``, in
        batches of MLflow's limit; None and non-finite values are skipped."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(_clip(name, MAX_KEY_CHARS), float(value), now, step)
                   for name, points in history.items() for step, value in points
                   if value is not None and math.isfinite(float(value))]
        for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):
            self._call("log metrics", lambda c=chunk: self.client.log_batch(self.run_id, metrics=c))

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._call(f"log artifact {path}",
                   lambda: self.client.log_artifact(self.run_id, str(path), artifact_path))

    def set_tag(self, key: str, value: str) -> None:
        self.set_tags({key: value})

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set several tags in batches; values cut to MLflow's length limit."""
        for chunk in _chunks(_tags(tags), MAX_PARAMS_TAGS_PER_BATCH):
            self._call("set tags", lambda c=chunk: self.client.log_batch(self.run_id, tags=c))

    def end(self, status: Status = "FINISHED") -> None:
        self._call(f"end the run as {status}",
                   lambda: self.client.set_terminated(self.run_id, status))

    def _call(self, what: str, call: Any) -> None:
        try:
            call()
        except Exception as error:
            raise _unavailable(self.tracking_uri, f"{what} for run {self.run_id}", error) from error


def _existing_run(client: MlflowClient, shown_uri: str, run_id: str) -> Any:
    """The run ``run_id``, which must exist and not be in MLflow's trash."""
    from mlflow.exceptions import MlflowException

    try:
        found = client.get_run(run_id)
    except MlflowException as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        found = None
    if found is None or found.info.lifecycle_stage == "deleted":
        raise RunNotFound(
            f"run {run_id} is not in MLflow at {shown_uri} (deleted, or logged to another "
            f"store): give the --mlflow-uri it was logged to, or remove {RUN_URI_FILE} to "
            "start a new run")
    return found


def _experiment_id(client: MlflowClient, tracking_uri: str, name: str) -> str:
    """The id of experiment ``name``, created (or restored from MLflow's trash) when needed.
    A SQLite store keeps its artifacts beside the database file, not in the current
    directory, which is MLflow's default."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage == "deleted":
            client.restore_experiment(found.experiment_id)
        return str(found.experiment_id)
    location = None
    if tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri.removeprefix("sqlite:///"))
        location = (database.parent / ARTIFACTS_BESIDE_DATABASE).as_uri()
    try:
        return str(client.create_experiment(name, artifact_location=location))
    except MlflowException:
        found = client.get_experiment_by_name(name)  # created meanwhile by another process
        if found is None:
            raise
        return str(found.experiment_id)


def _param(key: str, value: str) -> Any:
    from mlflow.entities import Param

    return Param(key, value)


def _tags(tags: Mapping[str, str]) -> list[Any]:
    from mlflow.entities import RunTag

    return [RunTag(_clip(k, MAX_KEY_CHARS), _clip(v, MAX_TAG_VALUE_CHARS)) for k, v in tags.items()]


def scrub(text: str, uri: str) -> str:
    """``text`` (an error from MLflow or below it) with ``uri``'s credentials redacted."""
    return redact_text(text.replace(uri, redact_url(uri)), url_secrets(uri))


def _unavailable(uri: str, what: str, error: BaseException) -> TrackingUnavailable:
    lines = str(error).strip().splitlines()
    cause = scrub(lines[0] if lines else "", uri)
    return TrackingUnavailable(
        f"MLflow at {redact_url(uri)} could not {what}: {type(error).__name__}: {_clip(cause, 300)}. "
        "Check that the tracking server is up (or the database or directory writable) and "
        "that --mlflow-uri is right")
