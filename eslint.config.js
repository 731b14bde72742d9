// Lint rules that guard the service, not its style: a promise nobody awaits is a request that can
// crash the process; an import that points up breaks the determinism or layering boundary.
import tseslint from 'typescript-eslint';

/** Node and I/O modules, which workflow code must never load (the worker's bundle refuses most anyway). */
const nodeAndIo = ['node:*', 'fs', 'path', 'os', 'crypto', 'net', 'http', 'https', 'child_process', 'pg', 'pg-*'];

export default tseslint.config(
  {
    ignores: ['node_modules/**', 'dist/**', '.data/**', '.tools/**', 'bench/results/**'],
  },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.base],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
    },
  },
  {
    // Deterministic code only: the workflow SDK, pure domain code, and type-only activity imports.
    files: ['workflows/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: nodeAndIo, message: 'workflow code is deterministic: no Node or I/O modules' },
            {
              group: ['@temporalio/*', '!@temporalio/workflow', '!@temporalio/common'],
              message: 'workflow code imports only the workflow SDK',
            },
            {
              group: ['../src/*', '!../src/domain'],
              message: 'workflow code imports only pure domain code from src/',
            },
            {
              group: ['../activities/*', '../activities'],
              message: 'workflow code imports activities as types only',
              allowTypeImports: true,
            },
          ],
        },
      ],
    },
  },
  {
    // Surfaces call the service; they never run ledger SQL themselves.
    files: ['src/api/**/*.ts', 'src/mcp/**/*.ts', 'src/cli/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/ledger/*', '!**/ledger/pool.js', '!**/ledger/migrate.js'],
              message: 'surfaces call the service module; only the ledger module runs SQL',
              allowTypeImports: true,
            },
            { group: ['**/activities/*', '**/activities'], message: 'surfaces never run ledger steps themselves' },
          ],
        },
      ],
    },
  },
  {
    // The ledger knows nothing of its callers; activities never start workflows.
    files: ['src/ledger/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/service/*', '**/api/*', '**/mcp/*', '**/cli/*', '**/workflows/*', '**/activities/*'],
              message: 'the ledger knows nothing of its callers',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['activities/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        { patterns: [{ group: ['@temporalio/client'], message: 'activities never start workflows' }] },
      ],
    },
  },
);
