# recipelab on an NVIDIA GPU box, first of all a DGX Spark (aarch64, GB10, 128 GB unified memory).
#
# The NGC PyTorch image already carries a CUDA build of PyTorch and TransformerEngine (the fp8
# path), both built for the platform, so neither is installed again: recipelab goes in with
# --no-deps and only its other dependencies are added. The image also pins its own packages in
# /etc/pip/constraint.txt (PIP_CONSTRAINT), which keeps pip from replacing any of them.
#
#   docker build -t recipelab .                              # or: docker compose up (see docker-compose.yml)
#   docker build --build-arg PYTORCH_IMAGE=nvcr.io/nvidia/pytorch:25.12-py3 -t recipelab .
#   docker run --rm --gpus all -v "$PWD/campaigns:/workspace/campaigns" recipelab run --name demo --preset spark
ARG PYTORCH_IMAGE=nvcr.io/nvidia/pytorch:25.10-py3
FROM ${PYTORCH_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/recipelab

# Dependencies first (their layer survives source edits): everything pyproject.toml lists,
# plus the [gpu] extra (NVML telemetry), except torch, which the base image provides.
COPY pyproject.toml README.md ./
RUN python -c "import torch; print(torch.__version__)" > /tmp/torch-version \
 && python -c "import tomllib; from packaging.requirements import Requirement; \
project = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
deps = project['dependencies'] + project['optional-dependencies']['gpu']; \
print('\n'.join(d for d in deps if Requirement(d).name != 'torch'))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY src ./src
RUN pip install --no-deps --no-build-isolation . \
 && python -c "import sys, torch, transformer_engine, recipelab; \
sys.exit(torch.__version__ != open('/tmp/torch-version').read().strip())" \
 && rm /tmp/torch-version

# Campaigns land in ./campaigns/NAME relative to the working directory: mount a volume there.
WORKDIR /workspace
ENTRYPOINT ["recipelab"]
CMD ["--help"]
