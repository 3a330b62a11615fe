# PgBouncer from Debian bookworm (1.18), the version the fleet test runs (npm run test:fleet), on
# a base pinned by tag and digest (deploy/README.md says how to check and move it).
FROM debian:bookworm-20260803-slim@sha256:abd67ffcfa541b485a3dff59865ab629aa048a6c613e639d36e7456b0b229241
RUN apt-get update && apt-get install -y --no-install-recommends pgbouncer && rm -rf /var/lib/apt/lists/* \
  && install -d -o postgres -g postgres -m 700 /run/pgbouncer
COPY pgbouncer-start.sh /usr/local/bin/pgbouncer-start.sh
USER postgres
EXPOSE 6432
# Writes the auth file from PGBOUNCER_USER and PGBOUNCER_PASSWORD, then becomes PgBouncer.
CMD ["sh", "/usr/local/bin/pgbouncer-start.sh"]
