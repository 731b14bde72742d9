// Lint rules that guard the service, not its style: a promise nobody awaits is a request that can
// crash the process; an import that points up breaks the determinism or layering boundary.
import tseslint from 'typescript-eslint';

/** Node and I/O modules, which workflow code must never load (the worker's bundle refuses most anyway). */
const nodeAndIo = ['node:*', 'fs', 'path', 'os', 'crypto', 'net', 'http', 'https', 'child_process', 'pg', 'pg-*'];

/** I/O modules the domain's pure rules never load (hashing with node:crypto is pure, and allowed). */
const domainIo = ['node:fs', 'node:fs/*', 'fs', 'fs/*', 'node:net', 'net', 'node:http', 'http', 'node:https', 'https', 'node:child_process', 'child_process', 'pg', 'pg-*', '@temporalio/client', '@temporalio/worker', 'fastify'];

/** Imports of the bench from product code, which would ship it in dist/ and the image. */
const notTheBench = { group: ['**/bench/*', '**/bench', '**/chaos/*', '**/chaos'], message: 'product code never imports the bench or the chaos run' };
/** Imports of the CLI from below it; what both need lives in src/support. */
const notTheCli = { group: ['**/cli/*'], message: 'the CLI is the top layer: move what is shared to src/support' };

/**
 * What a surface (API, MCP, CLI) may not import: SQL and ledger steps are the services' and the
 * activities'. Not even a type: a surface is handed the application context's services
 * (src/runtime/app-context.ts), never the pool they run on, and migrating or opening a pool is the
 * runtime's composition.
 */
const surfacePatterns = [
  {
    group: ['**/ledger/*', '**/ledger'],
    message: 'surfaces never run ledger steps or take the pool: call the services of the application context (src/runtime/app-context.ts)',
  },
  { group: ['**/activities/*', '**/activities'], message: 'surfaces never run ledger steps: activities are the worker\'s' },
];

/** Imports of the MCP or codec modules from the API, which would make them import each other. */
const notMcpOrCodec = {
  group: ['**/mcp/*', '**/mcp', '**/codec/*', '**/codec'],
  message: 'the API imports neither the MCP nor the codec module: they are handed to buildApi as extraRoutes (src/cli/http-app.ts)',
};

/** Rejection and error handlers that drop the failure without a word. */
const silentHandlers = [
  {
    selector: "CallExpression[callee.property.name='catch'] > :matches(ArrowFunctionExpression, FunctionExpression)[body.type='BlockStatement'][body.body.length=0]",
    message: 'a .catch that drops the error: log it, rethrow it, or assert on it',
  },
  {
    selector: "CallExpression[callee.property.name='then'] > :matches(ArrowFunctionExpression, FunctionExpression):nth-child(2)[body.type='BlockStatement'][body.body.length=0]",
    message: 'a rejection handler that drops the error: log it, rethrow it, or assert on it',
  },
  {
    selector: "CallExpression[callee.property.name=/^(on|once|addListener)$/][arguments.0.value='error'] > :matches(ArrowFunctionExpression, FunctionExpression)[body.type='BlockStatement'][body.body.length=0]",
    message: "an 'error' listener that drops the error: log what failed",
  },
];

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
      // A failure swallowed without a word is a failure nobody can diagnose: log it, rethrow it, or
      // (in tests) assert on it. Catching only what is expected (ENOENT, AbortError) is fine.
      'no-empty': ['error', { allowEmptyCatch: false }],
    },
  },
  {
    files: ['**/*.ts'],
    rules: {
      'no-restricted-syntax': ['error', ...silentHandlers],
    },
  },
  {
    // Imports point down: the CLI is the top of the program, and the bench is not part of it (it has
    // its own entry, bench/main.ts, and is not in dist/ or the image). Base rule, so it adds to the
    // typescript-eslint boundaries below instead of replacing them.
    files: ['src/**/*.ts', 'workflows/**/*.ts', 'activities/**/*.ts'],
    ignores: ['src/cli/**'],
    rules: { 'no-restricted-imports': ['error', { patterns: [notTheBench, notTheCli] }] },
  },
  {
    files: ['src/cli/**/*.ts'],
    rules: { 'no-restricted-imports': ['error', { patterns: [notTheBench] }] },
  },
  {
    // The bench and the scripts run the program's modules, not its commands.
    files: ['bench/**/*.ts', 'chaos/**/*.ts', 'scripts/**/*.ts'],
    rules: { 'no-restricted-imports': ['error', { patterns: [notTheCli] }] },
  },
  {
    // Deterministic code only: the workflow SDK, pure domain code, and type-only activity imports.
    files: ['workflows/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: nodeAndIo, message: 'workflow code never reaches any I/O: it is deterministic, so no Node or I/O modules' },
            {
              group: ['@temporalio/*', '!@temporalio/workflow', '!@temporalio/common'],
              message: 'workflow code imports only the workflow SDK',
            },
            {
              group: ['../src/*', '!../src/domain'],
              message: 'workflow code never reaches the ledger or any I/O: it imports only pure domain code from src/',
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
    files: ['src/mcp/**/*.ts', 'src/cli/**/*.ts'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: surfacePatterns }] },
  },
  {
    // The API is handed the routes of other modules (MCP, codec) by the code that starts it
    // (src/cli/http-app.ts); what they share with it lives in src/http.
    files: ['src/api/**/*.ts'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: [...surfacePatterns, notMcpOrCodec] }] },
  },
  {
    // What the API, the MCP endpoint and the codec endpoint share: below all three, and below the
    // runtime that composes them (what it needs of the application it declares itself, as
    // RateLimitedApp in rate-limit-hook.ts, and the application context satisfies it).
    files: ['src/http/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/ledger/*', '**/ledger', '**/activities/*', '**/activities'],
              message: 'src/http serves the surfaces: like them it never runs ledger steps or takes the pool',
            },
            {
              group: ['**/api/*', '**/api', '**/mcp/*', '**/mcp', '**/codec/*', '**/codec', '**/runtime/*', '**/runtime'],
              message: 'src/http imports no surface (API, MCP, codec endpoint) nor the runtime that composes them: declare the narrow interface it needs in src/http',
            },
          ],
        },
      ],
    },
  },
  {
    // The typed client is for callers of the API, in their own programs: it imports none of the
    // server's code, only its own files and the generated types.
    files: ['src/client/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['../../*', '!../../client', '../../client/*', '!../../client/**'],
              message: 'the client imports none of the server\'s code: a caller copies or installs it alone',
            },
            { group: ['**/api/*', '**/service/*', '**/domain/*', '**/ledger/*', '**/runtime/*', '**/support/*', '**/mcp/*', '**/providers/*'], message: 'the client imports none of the server\'s code' },
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
              group: ['**/service/*', '**/api/*', '**/mcp/*', '**/cli/*', '**/workflows/*', '**/activities/*', '**/runtime/*', '**/stack/*'],
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
  // The layout's floors (README.md, Layout), each block for folders no block above names with the
  // same rule, so none replaces another's patterns.
  {
    // Errors and pure rules: every layer may use them, workflow code included, so they import nothing
    // of the project but each other, and no I/O.
    files: ['src/domain/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['../*', '../**'], message: 'src/domain imports only src/domain: pure rules that every layer may use' },
            { group: domainIo, message: 'src/domain is pure: no I/O (workflow code may import it)' },
          ],
        },
      ],
    },
  },
  {
    // Process helpers and small utilities: the ground floor, below everything of the project.
    files: ['src/support/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        { patterns: [{ group: ['../*', '../**'], message: 'src/support imports nothing of the project: it is the ground floor' }] },
      ],
    },
  },
  {
    // The stack starts processes (Temporal, PostgreSQL, the UI): a leaf that knows no program. What the
    // program needs of it (search attributes, database roles, the payload key file) is handed in by
    // src/runtime/local-stack.ts.
    files: ['src/stack/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['../*', '!../support', '../../*'],
              message: 'src/stack imports only src/support: take what the program needs as a parameter from src/runtime/local-stack.ts',
            },
          ],
        },
      ],
    },
  },
  {
    // Authentication and the HTTP pieces the API, MCP and codec endpoints share sit below the service:
    // the errors and rules they need are src/domain's. Base rule, beside the typescript-eslint one of
    // src/http's block above; it restates the bench and CLI patterns it would otherwise replace.
    files: ['src/auth/**/*.ts', 'src/http/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            notTheBench,
            notTheCli,
            { group: ['**/service/*', '**/service'], message: 'auth and http sit below the service: errors and pure rules are in src/domain' },
          ],
        },
      ],
    },
  },
);
