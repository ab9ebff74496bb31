/**
 * The open-loop load generator, in its own process: requests leave at Poisson-distributed
 * times of a fixed rate whether or not earlier ones were answered (as independent users
 * arrive), and each latency counts from the request's scheduled time, so time spent queued
 * behind a slow service, here or there, is in the figure. A request unanswered by the end
 * of the grace period, or answered with an error, counts as infinitely slow.
 *
 * Usage: node driver.ts '<json DriverConfig>'; prints one JSON DriverResult line.
 */
import http from 'node:http';
import { percentile } from '../stats.ts';

export interface DriverConfig {
  port: number;
  route: string;
  rate: number;
  durationMs: number;
  /** Keys 1…rows, uniformly at random. */
  rows: number;
}

export interface DriverResult {
  offered: number;
  sent: number;
  answered: number;
  errors: number;
  /** Answered 503: refused by the service (its store failed fast, see `maxWaiting`). */
  refused: number;
  unanswered: number;
  /** Answers per second over the sending window. */
  achieved: number;
  /** Latency percentiles from the scheduled send time, ms; `null` when unanswered requests reach it (infinite). */
  p50: number | null;
  p99: number | null;
  /** p99 of the requests answered 200 only. */
  admittedP99: number | null;
}

const GRACE_MS = 2_000;
/** How close to the next arrival the sender stops sleeping on timers and spins on setImmediate. */
const SPIN_MS = 2;

async function drive(config: DriverConfig): Promise<DriverResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1_024 });
  const latencies: number[] = [];
  let sent = 0;
  let answered = 0;
  let errors = 0;
  let refused = 0;
  const admitted: number[] = [];
  const start = performance.now();
  const end = start + config.durationMs;
  let next = start;
  const settled: Promise<void>[] = [];

  const send = (scheduled: number): Promise<void> =>
    new Promise((resolve) => {
      sent++;
      const key = 1 + Math.floor(Math.random() * config.rows);
      const request = http.get({ agent, host: '127.0.0.1', port: config.port, path: `/${config.route}?k=${key}` }, (response) => {
        response.resume();
        response.on('end', () => {
          if (response.statusCode === 200) {
            answered++;
            latencies.push(performance.now() - scheduled);
            admitted.push(performance.now() - scheduled);
          } else {
            errors++;
            if (response.statusCode === 503) refused++;
          }
          resolve();
        });
      });
      request.on('error', () => {
        errors++;
        resolve();
      });
    });

  // Sends every request whose time has come, then yields to the event loop. Within a couple of
  // ms of the next arrival it comes back on setImmediate, not a timer (timers have a 1 ms floor,
  // which would bunch arrivals into lock-step bursts); further off it sleeps on a timer that
  // ends a ms early, so that at low rates the driver does not spin a core of this 2-core
  // machine away from the service and the database it measures.
  await new Promise<void>((done) => {
    const tick = (): void => {
      const now = performance.now();
      while (next <= now && next < end) {
        settled.push(send(next));
        next += (-Math.log(1 - Math.random()) * 1000) / config.rate;
      }
      if (next >= end) done();
      else if (next - now > SPIN_MS) setTimeout(tick, next - now - SPIN_MS);
      else setImmediate(tick);
    };
    tick();
  });
  const window = performance.now() - start;
  await Promise.race([Promise.all(settled), new Promise((resolve) => setTimeout(resolve, GRACE_MS))]);
  const unanswered = sent - answered - errors;
  for (let i = 0; i < unanswered + errors; i++) latencies.push(Number.POSITIVE_INFINITY);
  agent.destroy();
  const finite = (value: number): number | null => (Number.isFinite(value) ? value : null);
  return {
    offered: config.rate,
    sent,
    answered,
    errors,
    refused,
    unanswered,
    achieved: (answered * 1000) / window,
    p50: finite(percentile(latencies, 50)),
    p99: finite(percentile(latencies, 99)),
    admittedP99: admitted.length === 0 ? null : percentile(admitted, 99),
  };
}

const result = await drive(JSON.parse(process.argv[2] ?? '{}') as DriverConfig);
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
