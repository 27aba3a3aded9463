# syntax=docker/dockerfile:1
# The service from a built artifact: one stage installs the production dependencies alone (from package.json and
# the lock, so the layer is reused until they change), another compiles (its install, too, before the sources are
# copied, so that an edit reinstalls nothing); the runtime stage holds only their
# results (node_modules, dist/, the contract it serves) and runs as the image's unprivileged `node` user.
# test/production.release.test.ts runs the dependencies stage as written, assembles the runtime tree as its COPY lines say
# and starts it, as this file does.

FROM node:22-bookworm-slim AS dependencies
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

FROM node:22-bookworm-slim
ENV NODE_ENV=production HOST=0.0.0.0 PORT=3000
WORKDIR /app
COPY --from=dependencies /app/node_modules ./node_modules
COPY --from=build /app/package.json /app/openapi.yaml ./
COPY --from=build /app/dist ./dist
USER node
EXPOSE 3000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT ?? 3000) + '/health/ready').then((response) => process.exit(response.ok ? 0 : 1), () => process.exit(1))"]
CMD ["node", "dist/src/server.js"]
