// Runs the workload with no subscriber and prints the @opentelemetry modules the process
// resolved (none, unless `--load-telemetry` imports the telemetry entry afterwards: the
// control that shows the hook sees such an import).
const { runWorkload } = await import('./workload.ts');
await runWorkload();
if (process.argv.includes('--load-telemetry')) await import('../../src/telemetry/index.ts');
const loaded = globalThis.resolvedSpecifiers.filter((specifier) => specifier.startsWith('@opentelemetry/'));
console.log(JSON.stringify({ resolved: globalThis.resolvedSpecifiers.length, opentelemetry: loaded }));
