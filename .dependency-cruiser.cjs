// The directions of imports ARCHITECTURE.md draws, checked by dependency-cruiser on the whole import graph
// (re-exports and dynamic imports included): `npx depcruise src handlers jobs bench dev scripts` prints any
// import that breaks one, and test/dependencies.test.ts fails on it. "Type-only" imports are allowed where a
// rule says so: a type is vocabulary, not a call.

/** Imports that carry code: every import but `import type`. */
const CODE = { dependencyTypesNot: ['type-only'] };

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-tests-in-the-product',
      comment: 'Nothing the product, the bench or the tools run imports from the tests.',
      severity: 'error',
      from: { path: '^(src|handlers|jobs|bench|dev|scripts)/' },
      to: { path: '^test/' },
    },
    {
      name: 'no-dev-in-the-product',
      comment: 'The product (src, handlers, jobs) never imports the development tools in dev/ (the Slack emulator, the demo).',
      severity: 'error',
      from: { path: '^(src|handlers|jobs)/' },
      to: { path: '^dev/' },
    },
    {
      name: 'core-knows-no-edges',
      comment: 'The core takes a Messenger and returns facts: no Slack, no queue, no views, no front end, no processors.',
      severity: 'error',
      from: { path: '^src/core/' },
      to: { path: ['^src/(slack|queue|views|cli|commands|http)/', '^handlers/', '^jobs/', '^src/metrics\\.ts$', 'node_modules/(@slack/bolt|bullmq|ioredis)/'], ...CODE },
    },
    {
      name: 'data-layer-calls-no-logic',
      comment: 'src/db holds SQL: it calls no core logic and nothing above it. The step graph\'s tables are its vocabulary (src/db/steps.ts builds SQL from them).',
      severity: 'error',
      from: { path: '^src/db/' },
      to: { path: ['^src/(core|slack|queue|views|cli|commands|http)/', '^handlers/', '^jobs/'], pathNot: '^src/core/(lifecycle/stepGraph|states)\\.ts$', ...CODE },
    },
    {
      name: 'views-are-pure',
      comment: 'Views render facts: no database, no Slack client, no queue.',
      severity: 'error',
      from: { path: '^src/views/' },
      to: { path: ['^src/(db|slack|queue)/', 'node_modules/(pg|bullmq|ioredis)/'], ...CODE },
    },
    {
      name: 'only-the-worker-wires-processors',
      comment: 'The queue plumbing never reaches up into the processors; src/worker.ts wires them in.',
      severity: 'error',
      from: { path: '^(src|handlers)/', pathNot: '^src/worker\\.ts$' },
      to: { path: '^jobs/' },
    },
    {
      name: 'front-ends-call-use-cases',
      comment: 'The Slack listeners and the CLI parse, call src/commands and render: no SQL and no queue of their own. src/slack/delivery is the Slack side of the core\'s Messenger and records what it sends.',
      severity: 'error',
      from: { path: ['^src/cli/', '^handlers/', '^src/slack/'], pathNot: '^src/slack/delivery/' },
      to: { path: ['^src/(db|queue)/', 'node_modules/(pg|bullmq|ioredis)/'], ...CODE },
    },
    {
      name: 'listeners-are-a-thin-shell',
      comment: 'The Bolt listeners are a thin shell over src/slack: no kernel, no recompute.',
      severity: 'error',
      from: { path: '^handlers/' },
      to: { path: ['^src/core/(lifecycle|recompute)/'] },
    },
    {
      name: 'http-edge-reaches-the-core',
      comment: 'The HTTP edge (POST /lineage, GET /metrics) reaches the core and the metrics: no SQL, no Slack, no queue.',
      severity: 'error',
      from: { path: '^src/http/' },
      to: { path: ['^src/(db|slack|queue|views|cli)/', '^handlers/', '^jobs/', 'node_modules/(pg|bullmq|ioredis)/'], ...CODE },
    },
    {
      name: 'one-logger',
      comment: 'Every line goes through src/log.ts (redacted, bound to what it is about).',
      severity: 'error',
      from: { path: '^(src|handlers|jobs)/', pathNot: '^src/log\\.ts$' },
      to: { path: 'node_modules/(pino|pino-pretty)/' },
    },
    {
      name: 'one-registry',
      comment: 'Every series is registered in src/metrics.ts.',
      severity: 'error',
      from: { path: '^(src|handlers|jobs)/', pathNot: '^src/metrics\\.ts$' },
      to: { path: 'node_modules/prom-client/' },
    },
    {
      name: 'no-circular',
      comment: 'No module reaches itself through its imports (type-only imports aside).',
      severity: 'error',
      from: { path: '^(src|handlers|jobs)/' },
      to: { circular: true, viaOnly: { dependencyTypesNot: ['type-only'] } },
    },
    {
      name: 'no-unresolvable',
      comment: 'Every import resolves.',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default'], extensions: ['.ts', '.js', '.json'] },
    exclude: { path: '^(dist|node_modules)/' },
  },
};
