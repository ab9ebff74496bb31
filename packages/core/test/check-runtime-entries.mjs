// Fails when a runtime entry point of the built package (`.`, `./adapter`, `./memory`, `./go-go-scope`,
// `./telemetry`; ESM or CJS) reaches vitest through any of its imports (only `./conformance` may), or when one
// other than `./telemetry` reaches @opentelemetry/* (an optional peer dependency: only that entry may load it).
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const dist = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'dist');
const entries = ['index', 'adapter', 'memory', 'go-go-scope', 'telemetry'].flatMap((name) => [`${name}.js`, `${name}.cjs`]);
const isVitest = (specifier) => specifier === 'vitest' || specifier.startsWith('vitest/') || specifier.startsWith('@vitest/');
const isOpenTelemetry = (specifier) => specifier.startsWith('@opentelemetry/');
const specifiers = /(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)["']([^"']+)["']/g;

let failed = false;
for (const entry of entries) {
  const seen = new Set();
  let reachesOpenTelemetry = false;
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const source = readFileSync(file, 'utf8');
    for (const [, specifier] of source.matchAll(specifiers)) {
      if (specifier.startsWith('.')) visit(join(dirname(file), specifier));
      else if (isVitest(specifier) || (isOpenTelemetry(specifier) && !entry.startsWith('telemetry.'))) {
        console.error(`dist/${entry} reaches ${specifier} through ${file}`);
        failed = true;
      } else if (isOpenTelemetry(specifier)) reachesOpenTelemetry = true;
    }
  };
  visit(join(dist, entry));
  // The check must see the import it guards against: the telemetry entry does import the API.
  if (entry.startsWith('telemetry.') && !reachesOpenTelemetry) {
    console.error(`dist/${entry} does not import @opentelemetry/api: the pattern no longer finds its imports`);
    failed = true;
  }
  console.log(`dist/${entry}: ${seen.size} files, no vitest${entry.startsWith('telemetry.') ? '' : ', no @opentelemetry'}`);
}
process.exit(failed ? 1 : 0);
