/**
 * Preloaded by every example's `start` script (`node --import ../require-node.mjs src/main.ts`):
 * the examples are TypeScript files that Node runs directly, which needs Node.js >= 22.18 (or
 * >= 23.6). On an older Node, say so instead of failing with `Unknown file extension ".ts"`.
 * The published packages themselves need only Node.js >= 22 (their `engines`).
 */
const [major, minor] = process.versions.node.split('.').map(Number);
const stripsTypes = major > 23 || (major === 23 && minor >= 6) || (major === 22 && minor >= 18);
if (!stripsTypes) {
  console.error(
    `The stowage examples run their .ts files directly, which needs Node.js >= 22.18; this is Node.js ${process.versions.node}.\n` +
      'Use Node.js 22.18 or later (the repository is developed on Node 24, see .node-version). ' +
      'The @stowage packages themselves work on Node.js >= 22.',
  );
  process.exit(1);
}
