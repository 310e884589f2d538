#!/usr/bin/env bash
# Handraise's test command: idempotently set up a Debian machine (Python test
# extras, Chromium, local PostgreSQL), then run pytest with any given arguments.
set -euo pipefail

repo_root="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
cd "$repo_root"

PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q -e '.[test]'

chromium=/usr/lib/chromium/chromium
if [ ! -x "$chromium" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "run.sh: installing Debian's chromium for the browser tests" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
    else
        echo "run.sh: $chromium is missing; browser tests will skip (fail with CI=true)." >&2
        echo "run.sh: install it with: sudo apt-get update && sudo apt-get install -y chromium" >&2
    fi
fi

# The email tests read replies from a real IMAP server: Debian's Dovecot, started per test session
# by tests/harness/mail.py with a throwaway config (the system service is not needed).
if [ ! -x /usr/sbin/dovecot ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "run.sh: installing Debian's dovecot-imapd for the email tests" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dovecot-imapd
    else
        echo "run.sh: /usr/sbin/dovecot is missing; email tests will skip (fail with CI=true)." >&2
        echo "run.sh: install it with: sudo apt-get update && sudo apt-get install -y dovecot-imapd" >&2
    fi
fi

# The OpenID Connect sign-in tests run a real provider, node-oidc-provider, pinned by
# tests/oidc/package-lock.json and started per test session by tests/harness/oidc.py. npm ci runs again
# only when the lock file changed since the last install.
oidc_dir="$repo_root/tests/oidc"
oidc_stamp="$oidc_dir/node_modules/.handraise-installed-lock.json"
if ! cmp -s "$oidc_dir/package-lock.json" "$oidc_stamp" 2>/dev/null; then
    if command -v npm >/dev/null 2>&1; then
        echo "run.sh: installing node-oidc-provider for the OIDC sign-in tests (npm ci in tests/oidc)" >&2
        if (cd "$oidc_dir" && npm ci --no-audit --no-fund --loglevel=error); then
            cp "$oidc_dir/package-lock.json" "$oidc_stamp"
        elif [ "${CI:-}" = "true" ]; then
            echo "run.sh: npm ci in tests/oidc failed; CI needs the OIDC sign-in tests" >&2
            exit 1
        else
            echo "run.sh: npm ci in tests/oidc failed; the OIDC sign-in tests will skip." >&2
        fi
    elif [ "${CI:-}" = "true" ]; then
        echo "run.sh: npm is missing; CI needs the OIDC sign-in tests (Node.js 20 or newer with npm)" >&2
        exit 1
    else
        echo "run.sh: npm is missing; the OIDC sign-in tests will skip (fail with CI=true)." >&2
    fi
fi

postgres_answers() {
    if command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -h 127.0.0.1 -p 5432
    else
        python3 -c 'import socket; socket.create_connection(("127.0.0.1", 5432), timeout=2).close()' 2>/dev/null
    fi
}

if ! postgres_answers; then
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
        # Containers have no systemd, hence the redirect skip.
        for version in $(ls /etc/postgresql); do
            echo "run.sh: starting PostgreSQL $version" >&2
            pg_ctlcluster --skip-systemctl-redirect "$version" main start \
                || echo "run.sh: could not start PostgreSQL $version (try as root or the postgres user)" >&2
        done
    else
        echo "run.sh: PostgreSQL does not answer on 127.0.0.1:5432; its tests will skip or fail." >&2
    fi
fi

exec python3 -m pytest "$@"
