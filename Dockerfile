# Quorum extender image.
#   docker build -t quorum:dev .
# The builder stage installs the project and its dependencies into a virtualenv;
# the runtime stage copies only that virtualenv and runs as an unprivileged user.

FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# .dockerignore limits the context to pyproject.toml, README.md and extender/.
COPY . .
RUN pip install .

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=builder /opt/venv /opt/venv
USER 65532:65532
ENTRYPOINT ["quorum-extender"]
