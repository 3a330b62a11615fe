# Production image: build with dev dependencies, run the compiled server with production
# dependencies only, as a non-root user. (Not built on the development machines: no
# Docker engine runs there; test/platform/deployment.test.ts checks what can be checked without one.)
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci
COPY . .
RUN npm run build && npm prune --omit=dev

FROM node:24-bookworm-slim
ENV NODE_ENV=production HOST=0.0.0.0 PORT=3002 DATA_DIR=/app/.data
WORKDIR /app
COPY --from=build --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
COPY --from=build --chown=node:node /app/package.json ./
# The embedded database (the default without DATABASE_URL) lives in DATA_DIR: owned by the
# user the service runs as, and a volume, so the data outlives the container. One container
# per volume: a second process on the directory refuses to start (docs/operations.md).
RUN mkdir -p /app/.data && chown node:node /app/.data
VOLUME /app/.data
USER node
EXPOSE 3002
# Follows PORT when it is set at run time.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||3002)+'/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
# Migrations run at start-up; on their own, without the dev dependencies (no tsx here):
#   docker compose run --rm api-1 node dist/scripts/migrate.js
# The flags of `npm start` (production-flags.ts says why; test/integration/server.test.ts keeps them equal).
CMD ["node", "--no-allocation-site-pretenuring", "--heap-growing-percent=100", "dist/server.js"]
