# PgBouncer from Debian bookworm (1.18), the version the fleet test runs (npm run test:fleet).
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends pgbouncer && rm -rf /var/lib/apt/lists/*
USER postgres
EXPOSE 6432
CMD ["pgbouncer", "/etc/pgbouncer/pgbouncer.ini"]
