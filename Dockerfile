# One image for the worker and the API: both are stateless processes of the same code base.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
USER node
ENTRYPOINT ["npx", "tsx", "src/cli/main.ts"]
