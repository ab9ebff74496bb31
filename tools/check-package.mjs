#!/usr/bin/env node
/**
 * The published-package check run by each package's `check:package` (in `pnpm test`), from
 * the package's directory, after publint and arethetypeswrong:
 *
 * - size budget: the packed tarball and its unpacked size stay under the package's budget
 *   below (a dependency bundled by mistake, source maps or a test fixture in `dist` fail it);
 * - what a registry and a license scanner read: LICENSE in the tarball, `license`,
 *   `repository` (with `directory`; provenance publishing needs it), `homepage` and `bugs`;
 * - no relative links in the README: the registry's page has no files to link to.
 *
 * Raise a budget in the same change that explains why the package grew.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const BUDGETS = {
  // bytes: gzip tarball, unpacked
  '@stowage/core': { tarball: 350_000, unpacked: 1_500_000 },
  '@stowage/postgres': { tarball: 160_000, unpacked: 620_000 },
  '@stowage/mongo': { tarball: 160_000, unpacked: 620_000 },
};

const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
const budget = BUDGETS[pkg.name];
const problems = [];
if (budget === undefined) problems.push(`no size budget for ${pkg.name} in tools/check-package.mjs`);

const [packed] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
const kb = (bytes) => `${(bytes / 1000).toFixed(0)} kB`;
if (budget !== undefined) {
  if (packed.size > budget.tarball) problems.push(`tarball is ${kb(packed.size)}, over its budget of ${kb(budget.tarball)}`);
  if (packed.unpackedSize > budget.unpacked) problems.push(`unpacked size is ${kb(packed.unpackedSize)}, over its budget of ${kb(budget.unpacked)}`);
}
const files = packed.files.map((file) => file.path);
if (!files.includes('LICENSE')) problems.push('LICENSE is not in the tarball');
const maps = files.filter((file) => file.endsWith('.map'));
if (maps.length > 0) problems.push(`source maps in the tarball: ${maps.join(', ')}`);

if (typeof pkg.license !== 'string') problems.push('no "license"');
if (typeof pkg.repository?.url !== 'string' || typeof pkg.repository?.directory !== 'string') problems.push('no "repository" with url and directory');
if (typeof pkg.homepage !== 'string') problems.push('no "homepage"');
if (typeof pkg.bugs?.url !== 'string') problems.push('no "bugs.url"');

const readme = readFileSync('README.md', 'utf8');
for (const [, target] of readme.matchAll(/\]\(([^)\s]+)\)/g)) {
  if (!/^(https?:|mailto:|#)/.test(target)) problems.push(`README links to "${target}", which is dead on the registry's page (use an absolute URL)`);
}

if (problems.length > 0) {
  console.error(`${pkg.name}:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(`${pkg.name}: tarball ${kb(packed.size)} of ${kb(budget.tarball)}, unpacked ${kb(packed.unpackedSize)} of ${kb(budget.unpacked)}, ${files.length} files; LICENSE and repository metadata present`);
