#!/bin/sh
# PgBouncer's start in its image (deploy/pgbouncer.Dockerfile): its auth file written from the
# environment (compose passes POSTGRES_PASSWORD from .env), so that no password is kept in the
# repository or the image, then PgBouncer in this process's place (it gets docker stop's SIGTERM).
set -eu
: "${PGBOUNCER_USER:?PGBOUNCER_USER must be set}" "${PGBOUNCER_PASSWORD:?PGBOUNCER_PASSWORD must be set}"
# The auth file's quoting: each value in double quotes, a double quote doubled.
quote () { printf '"%s"' "$(printf '%s' "$1" | sed 's/"/""/g')"; }
umask 077
printf '%s %s\n' "$(quote "$PGBOUNCER_USER")" "$(quote "$PGBOUNCER_PASSWORD")" > "${PGBOUNCER_AUTH_FILE:-/run/pgbouncer/userlist.txt}"
exec pgbouncer "${PGBOUNCER_CONFIG:-/etc/pgbouncer/pgbouncer.ini}"
