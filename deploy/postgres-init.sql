-- Run once, when the PostgreSQL volume is created (docker-entrypoint-initdb.d). Behind PgBouncer
-- in transaction mode the service cannot set its statement timeout when it connects, so the
-- role carries it: DATABASE_STATEMENT_TIMEOUT_MS (15000) or less. The service checks it at
-- start-up. On an existing database run it by hand (and reconnect PgBouncer's server sessions:
-- RECONNECT on its admin console, or restart it).
ALTER ROLE tasks SET statement_timeout = 15000;
