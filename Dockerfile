# Handraise as a container: the same steps CI runs for the wheel (tests/core/test_wheel.py):
# build the wheel, install it into a fresh virtualenv, start it through deploy/entrypoint.sh
# from an empty folder. Configuration by file (/etc/handraise/config.toml) or environment
# (HANDRAISE_<TABLE>__<KEY>); data in /data (the SQLite default; use PostgreSQL for several instances),
# the server secret in /data/.config/handraise, apart from the database's folder.
#
#   docker build -t handraise .
#   docker run -p 8080:8080 -e HANDRAISE_SERVER__PUBLIC_URL=https://hr.example.com handraise

FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY handraise ./handraise
COPY core ./core
COPY bots ./bots
COPY webforms ./webforms
COPY templates ./templates
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
# Connectors' extras: all (telegram, matrix, slack), or a subset such as "telegram".
ARG EXTRAS=all
COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/handraise \
    && /opt/handraise/bin/pip install --no-cache-dir "$(ls /wheels/handraise-*.whl)[${EXTRAS}]" \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --home-dir /data --no-create-home handraise \
    && mkdir -p /data /etc/handraise \
    && chown handraise /data
COPY deploy/entrypoint.sh /usr/local/bin/handraise-entrypoint
ENV PATH=/opt/handraise/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    XDG_DATA_HOME=/data \
    XDG_CONFIG_HOME=/data/.config \
    HANDRAISE_SERVER__HOST=0.0.0.0 \
    HANDRAISE_SERVER__PORT=8080
USER handraise
WORKDIR /data
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 CMD ["handraise-entrypoint", "healthcheck"]
ENTRYPOINT ["handraise-entrypoint"]
CMD ["serve"]
