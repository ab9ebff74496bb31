import net from 'node:net';

/**
 * How a cut looks to the client:
 * - `reset`: every open connection is reset (RST) and new ones are reset on arrival — a server
 *   that went away, a firewall rejecting. Clients learn at once.
 * - `blackhole`: bytes stop flowing in both directions and new connections hang, with nothing
 *   sent back — a network partition. Only the client's own timeouts end its wait. On restore
 *   the held connections resume, as TCP connections do when a partition heals.
 */
export type CutMode = 'reset' | 'blackhole';

interface Pair {
  client: net.Socket;
  upstream: net.Socket | null;
}

/**
 * A TCP proxy on 127.0.0.1 between stowage and a database, which the test cuts and restores.
 * Plain `node:net`; it only ever connects to loopback ports: the target it was given, or the
 * one a failover moved it to ({@link TcpProxy.retarget}).
 */
export class TcpProxy {
  #state: 'open' | CutMode = 'open';
  readonly #pairs = new Set<Pair>();
  #accepted = 0;
  #reset = 0;
  private readonly server: net.Server;
  private target: { host: string; port: number };

  private constructor(server: net.Server, target: { host: string; port: number }) {
    this.server = server;
    this.target = target;
  }

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    if (!isLoopback(target.host)) throw new Error(`proxy target must be a loopback address, got ${target.host}`);
    const server = net.createServer();
    const proxy = new TcpProxy(server, target);
    server.on('connection', (socket) => proxy.#accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return proxy;
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  get state(): 'open' | CutMode {
    return this.#state;
  }

  /** Connections accepted and connections reset so far. */
  get stats(): { accepted: number; reset: number; open: number } {
    return { accepted: this.#accepted, reset: this.#reset, open: this.#pairs.size };
  }

  /** Replaces host:port in a connection URL with this proxy's address. */
  rewriteUrl(url: string): string {
    const parsed = new URL(url);
    parsed.hostname = '127.0.0.1';
    parsed.port = String(this.port);
    return parsed.toString();
  }

  cut(mode: CutMode): void {
    this.#state = mode;
    for (const pair of [...this.#pairs]) {
      if (mode === 'reset') this.#resetPair(pair);
      else this.#hold(pair);
    }
  }

  restore(): void {
    this.#state = 'open';
    for (const pair of this.#pairs) this.#flow(pair);
  }

  /**
   * Sends every new connection to `target` from now on and resets the open ones, as a failover
   * proxy does when its health check moves to another server (HAProxy's
   * `on-marked-down shutdown-sessions`, PgBouncer after a `RELOAD` with a new host).
   */
  retarget(target: { host: string; port: number }): void {
    if (!isLoopback(target.host)) throw new Error(`proxy target must be a loopback address, got ${target.host}`);
    this.target = target;
    for (const pair of [...this.#pairs]) this.#resetPair(pair);
  }

  async close(): Promise<void> {
    for (const pair of [...this.#pairs]) this.#resetPair(pair);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  #accept(client: net.Socket): void {
    this.#accepted += 1;
    client.setNoDelay(true);
    const pair: Pair = { client, upstream: null };
    if (this.#state === 'reset') {
      this.#reset += 1;
      client.resetAndDestroy();
      return;
    }
    this.#pairs.add(pair);
    client.on('error', () => this.#drop(pair));
    client.on('close', () => this.#drop(pair));
    if (this.#state === 'blackhole') {
      client.pause();
      return;
    }
    this.#flow(pair);
  }

  /** Connects upstream if needed and lets bytes flow both ways. */
  #flow(pair: Pair): void {
    if (pair.client.destroyed) return;
    if (pair.upstream === null) {
      const upstream = net.connect({ host: this.target.host, port: this.target.port });
      upstream.setNoDelay(true);
      upstream.on('error', () => this.#drop(pair));
      upstream.on('close', () => this.#drop(pair));
      pair.upstream = upstream;
    }
    pair.client.pipe(pair.upstream);
    pair.upstream.pipe(pair.client);
  }

  #hold(pair: Pair): void {
    pair.client.unpipe();
    pair.client.pause();
    if (pair.upstream) {
      pair.upstream.unpipe();
      pair.upstream.pause();
    }
  }

  #resetPair(pair: Pair): void {
    this.#reset += 1;
    this.#pairs.delete(pair);
    if (!pair.client.destroyed) pair.client.resetAndDestroy();
    if (pair.upstream && !pair.upstream.destroyed) pair.upstream.destroy();
  }

  #drop(pair: Pair): void {
    if (!this.#pairs.delete(pair)) return;
    pair.client.destroy();
    pair.upstream?.destroy();
  }
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
