# specwatch sidecar image: small, pinned base, non-root, read-only-root-filesystem friendly.
# Build: docker build -t specwatch .   Run: docker run --read-only -p 9753:9753 specwatch run --server-url ...
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
RUN pip install --no-cache-dir --no-compile --prefix=/install .

FROM python:3.11.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SPECWATCH_LISTEN=0.0.0.0:9753
COPY --from=build /install /usr/local
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin specwatch
USER 10001
EXPOSE 9753
# Nothing is written at run time except an optional --hlog file: mount a volume for it.
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; port = os.environ['SPECWATCH_LISTEN'].rsplit(':', 1)[1]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2)"]
ENTRYPOINT ["specwatch"]
CMD ["run"]
