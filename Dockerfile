# The API and the worker as production runs them: compiled once (`npm run build`: dist/ and the workflow
# bundle), then plain node on the pinned Node.js (NODE_VERSION in scripts/stack.env), production dependencies
# only. docker-compose.yml runs this image as `api`, `worker` and the one-shot `migrate`.
FROM node:24.22.3-bookworm-slim AS build
WORKDIR /app
# patches/ before the install: its postinstall applies them (patch-package), in both stages.
COPY package.json package-lock.json ./
COPY patches patches
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src src
RUN npm run build

FROM node:24.22.3-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
COPY patches patches
RUN npm ci --omit=dev --no-audit --no-fund
COPY --from=build /app/dist dist
COPY lua lua
COPY migrations migrations
COPY openapi.yaml ./
USER node
# Production unless the deployment says otherwise: development secrets and routes refused (docs/deploy.md).
ENV NODE_ENV=production
CMD ["node", "dist/api/main.js"]
