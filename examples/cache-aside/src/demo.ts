/**
 * Cache-aside with @stowage/postgres: `getOrSet` in front of a slow function, TTLs on the
 * database clock, listing keys by glob pattern, deleting by pattern, and `clear()` that only
 * touches its own prefix.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { PostgresCacheProvider } from '@stowage/postgres';

export interface Check {
  claim: string;
  ok: boolean;
}

export interface CacheDemoSummary {
  loaderCalls: Record<string, number>;
  keysAfterFill: string[];
  keysMatchingRates: string[];
  keysAfterDeleteByPattern: string[];
  otherCacheKeysAfterClear: string[];
  checks: Check[];
}

/** A slow upstream call (think: a pricing API); counts how often it really runs. */
function slowUpstream() {
  const calls: Record<string, number> = {};
  const fetchRate = async (currency: string): Promise<{ currency: string; perEuro: number }> => {
    calls[currency] = (calls[currency] ?? 0) + 1;
    await sleep(200);
    return { currency, perEuro: currency === 'USD' ? 1.08 : 0.85 };
  };
  return { calls, fetchRate };
}

export async function runCacheDemo({ url, log = console.log }: { url: string; log?: (line: string) => void }): Promise<CacheDemoSummary> {
  const run = randomUUID().slice(0, 8);
  // Two caches sharing one table, told apart by their prefix.
  const rates = new PostgresCacheProvider({ url, prefix: `demo-${run}:rates:`, pool: { max: 2 } });
  const sessions = new PostgresCacheProvider({ url, prefix: `demo-${run}:sessions:`, pool: { max: 2 } });
  const upstream = slowUpstream();
  const checks: Check[] = [];
  const check = (claim: string, ok: boolean) => {
    checks.push({ claim, ok });
    log(`  ${ok ? '✔' : '✘'} ${claim}`);
  };
  const timed = async <T>(what: string, work: () => Promise<T>): Promise<T> => {
    const started = performance.now();
    const value = await work();
    log(`  ${what}: ${JSON.stringify(value)} (${Math.round(performance.now() - started)} ms)`);
    return value;
  };

  try {
    log('1. getOrSet in front of a slow function');
    await timed('first  getOrSet("EUR:USD")', () => rates.getOrSet('EUR:USD', () => upstream.fetchRate('USD'), 60_000));
    await timed('second getOrSet("EUR:USD")', () => rates.getOrSet('EUR:USD', () => upstream.fetchRate('USD'), 60_000));
    check('the slow function ran once; the second call was served from the cache', upstream.calls.USD === 1);

    log('2. ten concurrent getOrSet calls for a key nobody has cached yet');
    await Promise.all(Array.from({ length: 10 }, () => rates.getOrSet('EUR:GBP', () => upstream.fetchRate('GBP'), 60_000)));
    check('they shared one run of the slow function', upstream.calls.GBP === 1);

    log('3. a TTL of 1 s, counted on the database clock');
    await rates.set('EUR:CHF', { currency: 'CHF', perEuro: 0.94 }, 1_000);
    const before = await rates.has('EUR:CHF');
    await sleep(1_500);
    const after = await rates.has('EUR:CHF');
    log(`  has("EUR:CHF") right away: ${before}; 1.5 s later: ${after}`);
    check('the entry expired after its TTL', before && !after);

    log('4. keys and deletes by glob pattern (* any run, ? one character, every other character literal)');
    await rates.set('EUR:JPY', { currency: 'JPY', perEuro: 162 });
    await rates.set('EUR:100%_off', { note: 'a key with % and _ in it' });
    await rates.set('USD:EUR', { currency: 'EUR', perEuro: 1 });
    const keysAfterFill = await rates.keys();
    log(`  keys(): ${JSON.stringify(keysAfterFill)}`);
    const keysMatchingRates = await rates.keys('EUR:???');
    log(`  keys("EUR:???"): ${JSON.stringify(keysMatchingRates)}`);
    check('"?" matched exactly one character, and "%" / "_" stayed literal', JSON.stringify(keysMatchingRates) === JSON.stringify(['EUR:GBP', 'EUR:JPY', 'EUR:USD']));
    const literal = await rates.keys('EUR:100%_off');
    check('a pattern with "%" and "_" matched only the key spelled exactly so', JSON.stringify(literal) === JSON.stringify(['EUR:100%_off']));
    for (const key of await rates.keys('EUR:*')) await rates.delete(key);
    const keysAfterDeleteByPattern = await rates.keys();
    log(`  after deleting keys("EUR:*"): ${JSON.stringify(keysAfterDeleteByPattern)}`);
    check('deleting by pattern left only USD:EUR', JSON.stringify(keysAfterDeleteByPattern) === JSON.stringify(['USD:EUR']));

    log('5. clear() empties only its own prefix');
    await sessions.set('user-1', { cart: ['book'] });
    await rates.clear();
    const otherCacheKeysAfterClear = await sessions.keys();
    log(`  rates.keys() after rates.clear(): ${JSON.stringify(await rates.keys())}; sessions.keys(): ${JSON.stringify(otherCacheKeysAfterClear)}`);
    check('rates.clear() emptied the rates cache and left the sessions cache alone', (await rates.keys()).length === 0 && otherCacheKeysAfterClear.length === 1);
    await sessions.clear();

    return { loaderCalls: { ...upstream.calls }, keysAfterFill, keysMatchingRates, keysAfterDeleteByPattern, otherCacheKeysAfterClear, checks };
  } finally {
    await rates.close();
    await sessions.close();
  }
}
