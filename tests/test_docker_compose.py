"""docker-compose.yml, as Compose itself resolves it: a NIM serving the LLM, recipelab using it.

``docker-compose config`` validates and normalizes the file without a Docker engine (checked
with Debian's docker-compose 1.29, which prints YAML only; Compose v2 prints YAML by default
too). Values are read in the forms either version prints: short or long volume syntax, ``10m``
or ``600s`` or ``10m0s`` for durations, ``16gb`` or a byte count for sizes, ``all`` or ``-1``
for a device count.

Skipped where docker-compose is absent, unless ``CI`` is set: then it fails, since CI must run it
(``scripts/install-llm-test-deps`` installs Debian's docker-compose).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.llm_server import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
# Variables the file reads; the tests set them (or leave them unset) themselves.
COMPOSE_VARIABLES = ("NGC_API_KEY", "NIM_IMAGE", "RECIPELAB_LLM_MODEL", "COMPOSE_FILE",
                     "COMPOSE_PROJECT_NAME", "COMPOSE_PROFILES")
DUMMY_KEY = "nvapi-dummy-key-for-tests"


def docker_compose() -> str:
    path = shutil.which("docker-compose")
    if path is None:
        skip_or_fail("docker-compose is not installed",
                     hint="to run this test, install Compose (Debian/Ubuntu, as root: apt-get "
                          "install docker-compose; 'make test' does it when run as root)")
    return path


def compose_config(**env: str) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` on the repository's file, with only ``env`` of the file's variables."""
    environment = {key: value for key, value in os.environ.items() if key not in COMPOSE_VARIABLES}
    environment.update(env)
    return subprocess.run([docker_compose(), "--file", str(COMPOSE_FILE), "config"], cwd=ROOT,
                          env=environment, capture_output=True, text=True, timeout=60, check=False)


def parsed(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The resolved configuration that a successful ``docker-compose config`` printed."""
    assert result.returncode == 0, result.stderr
    yaml = importlib.import_module("yaml")  # PyYAML comes with optuna; it ships no type stubs
    config = yaml.safe_load(result.stdout)
    assert isinstance(config, dict)
    return config


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return parsed(compose_config(NGC_API_KEY=DUMMY_KEY))


def seconds(duration: str | int | float) -> float:
    """A Compose duration (``600s``, ``10m``, ``10m0s``, ``1h30m``) in seconds."""
    if isinstance(duration, (int, float)):
        return float(duration)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(float(number) * units[unit] for number, unit in parts)


def size_bytes(size: str | int) -> int:
    """A Compose byte size (``16gb``, ``16g``, ``17179869184``) in bytes."""
    if isinstance(size, int):
        return size
    match = re.fullmatch(r"(\d+)\s*([kmg]?)b?", size.strip().lower())
    assert match, f"not a size: {size!r}"
    return int(match[1]) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match[2]]


def volumes(service: dict[str, Any]) -> dict[str, str]:
    """The service's volume mounts as ``{target: source}``, from short or long syntax."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        mounts[target] = source
    return mounts


def gpu_devices(service: dict[str, Any]) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = (
        service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", []))
    return devices


@pytest.mark.parametrize("name", ["nim", "recipelab"])
def test_service_reserves_the_gpus(config: dict[str, Any], name: str) -> None:
    devices = gpu_devices(config["services"][name])

    assert len(devices) == 1
    assert devices[0]["driver"] == "nvidia"
    assert "gpu" in devices[0]["capabilities"]
    assert devices[0]["count"] in ("all", -1) or int(devices[0]["count"]) >= 1


def test_nim_is_healthy_only_when_its_model_is_ready(config: dict[str, Any]) -> None:
    healthcheck = config["services"]["nim"]["healthcheck"]

    assert "http://localhost:8000/v1/health/ready" in " ".join(healthcheck["test"])
    assert seconds(healthcheck["start_period"]) >= 300  # the first start downloads the model


def test_nim_has_shared_memory_a_cache_volume_its_port_and_the_ngc_key(config: dict[str, Any]) -> None:
    nim = config["services"]["nim"]

    assert nim["image"] == "nvcr.io/nim/meta/llama-3.1-8b-instruct:latest"
    assert size_bytes(nim["shm_size"]) >= 16 * 1024**3
    assert volumes(nim) == {"/opt/nim/.cache": "nim-cache"}
    assert "nim-cache" in config["volumes"]
    assert nim["environment"]["NGC_API_KEY"] == DUMMY_KEY
    published = [port if isinstance(port, (str, int)) else f"{port['published']}:{port['target']}"
                 for port in nim["ports"]]
    assert [str(port) for port in published] == ["8000:8000"]


def test_recipelab_starts_after_a_healthy_nim_and_talks_to_it(config: dict[str, Any]) -> None:
    recipelab = config["services"]["recipelab"]

    assert recipelab["depends_on"] == {"nim": {"condition": "service_healthy"}}
    assert recipelab["environment"]["RECIPELAB_LLM_BASE_URL"] == "http://nim:8000/v1"
    assert recipelab["environment"]["RECIPELAB_LLM_MODEL"] == "meta/llama-3.1-8b-instruct"
    assert volumes(recipelab)["/workspace/campaigns"] == "campaigns"
    assert "campaigns" in config["volumes"]
    assert Path(recipelab["build"]["context"]).resolve() == ROOT
    assert recipelab["command"] == ["run", "--name", "overnight", "--preset", "spark",
                                    "--hours", "10", "--proposer", "hybrid"]


def test_image_and_model_come_from_the_environment() -> None:
    services = parsed(compose_config(NGC_API_KEY=DUMMY_KEY, NIM_IMAGE="nvcr.io/nim/example/other:1.0",
                                     RECIPELAB_LLM_MODEL="example/other"))["services"]

    assert services["nim"]["image"] == "nvcr.io/nim/example/other:1.0"
    assert services["recipelab"]["environment"]["RECIPELAB_LLM_MODEL"] == "example/other"


def test_a_missing_ngc_api_key_is_an_error_that_names_it() -> None:
    result = compose_config()

    assert result.returncode != 0
    assert "NGC_API_KEY" in result.stderr
