# One image for the worker and the API: both are stateless processes of the same code base.
# They run compiled JavaScript (npm run build), not TypeScript under tsx, and the workflows are
# bundled at build time: an idle worker is ~160 MB instead of ~340 MB (no tsx loader, no webpack).
# Node 24, the LTS line the README names. CI runs these npm steps outside a container (.ci/run).

FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY build ./build
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
# Also bundles the workflows (dist/workflow-bundle.js), named by the hash of the code they came from.
RUN npm run build

FROM node:24-bookworm-slim
WORKDIR /app
# glibc gives each thread that allocates its own malloc arena; with Temporal core's Rust threads
# that keeps 50-70 MB of freed memory resident in a worker (bench M1). Two is the usual setting.
ENV MALLOC_ARENA_MAX=2
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY --from=build /app/dist ./dist
# `worker` runs the bundle built above (its --bundle), and refuses it if it were not built from the
# workflow code in dist/; the other commands ignore it.
ENV CHARGEGUARD_WORKFLOW_BUNDLE=/app/dist/workflow-bundle.js
# V8's compiled code of every module the commands load, made once here (`--help` loads them all),
# so a new container's first worker does not compile them: it polls sooner after a
# crash. Read-only at run time (the node user cannot add to it; Node then just does not cache).
ENV NODE_COMPILE_CACHE=/app/.compile-cache
RUN node dist/src/cli/main.js --help > /dev/null
USER node
# A worker runs with `node --optimize-for-size dist/src/cli/main.js worker` (docker-compose.yml):
# V8 flags cannot go through NODE_OPTIONS, and the API does not need to pay the flag's CPU.
ENTRYPOINT ["node", "dist/src/cli/main.js"]
