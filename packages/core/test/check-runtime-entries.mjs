// Fails when a runtime entry point of the built package (`.` or `./memory`, ESM or CJS)
// reaches vitest through any of its imports. Only `./conformance` may import vitest.
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const dist = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'dist');
const entries = ['index.js', 'index.cjs', 'memory.js', 'memory.cjs'];
const specifiers = /(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)["']([^"']+)["']/g;

let failed = false;
for (const entry of entries) {
  const seen = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const source = readFileSync(file, 'utf8');
    for (const [, specifier] of source.matchAll(specifiers)) {
      if (specifier.startsWith('.')) visit(join(dirname(file), specifier));
      else if (specifier === 'vitest' || specifier.startsWith('vitest/') || specifier.startsWith('@vitest/')) {
        console.error(`dist/${entry} reaches ${specifier} through ${file}`);
        failed = true;
      }
    }
  };
  visit(join(dist, entry));
  console.log(`dist/${entry}: ${seen.size} files, no vitest`);
}
process.exit(failed ? 1 : 0);
