# Production image: build with dev dependencies, run the compiled server with production
# dependencies only, as a non-root user. (Not built on the development machines: no
# Docker registry is reachable there.)
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci
COPY . .
RUN npm run build && npm prune --omit=dev

FROM node:24-bookworm-slim
ENV NODE_ENV=production HOST=0.0.0.0 PORT=3002
WORKDIR /app
COPY --from=build --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
COPY --from=build --chown=node:node /app/package.json ./
USER node
EXPOSE 3002
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s CMD node -e "fetch('http://127.0.0.1:3002/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
# The flags of `npm start` (production-flags.ts says why; test/integration/server.test.ts keeps them equal).
CMD ["node", "--no-allocation-site-pretenuring", "--heap-growing-percent=100", "dist/server.js"]
