#!/bin/sh
# Starts Handraise from an installed wheel: in the container image (Dockerfile) and in CI's wheel
# test (tests/core/test_wheel.py), which runs this script in a fresh virtualenv.
#
#   entrypoint.sh                  handraise serve
#   entrypoint.sh --port 9000      handraise serve --port 9000
#   entrypoint.sh keys create ...  any other handraise command
#   entrypoint.sh healthcheck      exit 0 when /healthz answers 200 (the image's HEALTHCHECK)
#
# Configuration by file (HANDRAISE_CONFIG, else /etc/handraise/config.toml when present) or by
# HANDRAISE_<TABLE>__<KEY> environment variables.
set -eu

if [ -z "${HANDRAISE_CONFIG:-}" ] && [ -f /etc/handraise/config.toml ]; then
    export HANDRAISE_CONFIG=/etc/handraise/config.toml
fi

if [ "${1:-}" = "healthcheck" ]; then
    exec python - <<'PY'
import os, sys, urllib.request
port = os.environ.get("HANDRAISE_SERVER__PORT", "8080")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError as e:
    print(f"healthcheck: {e}", file=sys.stderr)
    sys.exit(1)
PY
fi

case "${1:-}" in
    "" | -*) set -- serve "$@" ;;
esac
exec handraise "$@"
