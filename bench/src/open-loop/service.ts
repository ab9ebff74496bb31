/**
 * The HTTP service of the open-loop bench, in its own process: one implementation (stowage or
 * a baseline) behind three routes, as a small production service would run it.
 *
 *   GET /get?k=N    one key-value read                                  (kv.get)
 *   GET /read?k=N   read-through: the cache, loading from the kv on a miss, then a kv write
 *   GET /write?k=N  one key-value write                                 (kv.set)
 *   GET /stats      requests, driver statements and CPU since the last /stats (then reset)
 *
 * Usage: node service.ts '<json ServiceConfig>'; prints `listening <port>` when ready.
 */
import http from 'node:http';
import { routesFor, type ServiceConfig } from './impls.ts';

const config = JSON.parse(process.argv[2] ?? '{}') as ServiceConfig;
const counters = { requests: 0, statements: 0, cpu: process.cpuUsage() };
const routes = await routesFor(config, () => counters.statements++);

const server = http.createServer((request, response) => {
  const url = new URL(request.url ?? '/', 'http://service');
  if (url.pathname === '/stats') {
    const cpu = process.cpuUsage(counters.cpu);
    response.end(JSON.stringify({ requests: counters.requests, statements: counters.statements, cpuMicros: cpu.user + cpu.system }));
    counters.requests = 0;
    counters.statements = 0;
    counters.cpu = process.cpuUsage();
    return;
  }
  const route = routes[url.pathname.slice(1) as keyof typeof routes];
  if (route === undefined) {
    response.statusCode = 404;
    response.end();
    return;
  }
  counters.requests++;
  route(url.searchParams.get('k') ?? '1').then(
    (body) => response.end(body),
    (error: unknown) => {
      response.statusCode = 503;
      response.end(error instanceof Error ? error.message : String(error));
    },
  );
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address !== null ? address.port : 0}\n`);
});
process.on('SIGTERM', () => {
  server.close();
  void routes.close().finally(() => process.exit(0));
});
