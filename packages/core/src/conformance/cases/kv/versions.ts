/**
 * KeyValueStore cases: versions (growing, never reused, also after delete or expiry), entry
 * metadata, and compareAndSet, alone and under contention.
 */
import { expect } from 'vitest';
import { defineCases } from '../../harness.js';
import { PAST_SHORT_TTL, SHORT_TTL, expectReject, parallel, retryOnConflict, sleep } from '../../helpers.js';

export const versionCases = defineCases('KeyValueStore', (it) => {
  it('versions grow with every write and are never reused for a key, also after delete or expiry', async (s) => {
    const kv = await s.kv();
    const versions: number[] = [];
    const record = async (key: string) => {
      const entry = await kv.getEntry(key);
      expect(Number.isSafeInteger(entry?.version) && entry!.version > 0, `version of ${key}: ${entry?.version}`).toBe(true);
      versions.push(entry!.version);
    };
    await kv.set('a', '1');
    await record('a');
    await kv.set('a', '2');
    await record('a');
    await kv.setMany([{ key: 'a', value: '3' }]);
    await record('a');
    const entry = await kv.getEntry('a');
    expect(entry).toMatchObject({ key: 'a', value: '3', expiresAt: null });
    expect(entry?.updatedAt).toBeInstanceOf(Date);
    versions.push(await kv.compareAndSet('a', '4', entry!.version));
    await record('a');
    for (let round = 0; round < 3; round++) {
      await kv.delete('a');
      await kv.set('a', `again ${round}`);
      await record('a');
    }
    await kv.set('a', 'short', { ttl: SHORT_TTL });
    await record('a');
    await sleep(PAST_SHORT_TTL);
    await kv.set('a', 'fresh');
    await record('a');
    // compareAndSet's result is the version getEntry then reads; every other version is new.
    expect(versions[4]).toBe(versions[3]);
    const distinct = versions.filter((version, index) => index !== 4);
    for (let i = 1; i < distinct.length; i++) expect(distinct[i], `version ${i} after ${distinct.slice(0, i)}`).toBeGreaterThan(distinct[i - 1]!);
  });

  it('compareAndSet holds only against the incarnation it read: a version from before a delete or expiry never matches again', async (s) => {
    const kv = await s.kv();
    await kv.set('k', 'first');
    const beforeDelete = (await kv.getEntry('k'))!.version;
    await kv.delete('k');
    await kv.set('k', 'acknowledged');
    await kv.set('k', 'acknowledged again');
    await expectReject(() => kv.compareAndSet('k', 'stale write', beforeDelete), 'E_VERSION_CONFLICT', 'version from before delete');
    expect(await kv.get('k')).toBe('acknowledged again');

    await kv.compareAndSet('t', 'expiring', null, { ttl: SHORT_TTL });
    const beforeExpiry = (await kv.getEntry('t'))!.version;
    await sleep(PAST_SHORT_TTL);
    await kv.compareAndSet('t', 'recreated', null);
    await expectReject(() => kv.compareAndSet('t', 'stale write', beforeExpiry), 'E_VERSION_CONFLICT', 'version from before expiry');
    expect(await kv.get('t')).toBe('recreated');

    // A version from another key's history does not match either.
    await kv.setMany([{ key: 'x', value: '1' }, { key: 'y', value: '1' }]);
    const xVersion = (await kv.getEntry('x'))!.version;
    const yVersion = (await kv.getEntry('y'))!.version;
    if (xVersion !== yVersion) await expectReject(() => kv.compareAndSet('y', 'z', xVersion), 'E_VERSION_CONFLICT', 'version of another key');
  });

  it('entries returns metadata of matching live keys in order', async (s) => {
    const kv = await s.kv();
    await kv.setMany([
      { key: 'x:2', value: 'b', ttl: 60_000 },
      { key: 'x:1', value: 'a' },
      { key: 'y:1', value: 'c' },
    ]);
    const entries = await kv.entries('x:*');
    expect(entries.map((e) => e.key)).toEqual(['x:1', 'x:2']);
    for (const entry of entries) expect(entry.version).toBe((await kv.getEntry(entry.key))!.version);
    expect(entries[0]).not.toHaveProperty('value');
    expect(entries[0]!.expiresAt).toBeNull();
    expect(entries[1]!.expiresAt).toBeInstanceOf(Date);
  });

  it('compareAndSet: null creates only when absent; a version writes only when current', async (s) => {
    const kv = await s.kv();
    const v1 = await kv.compareAndSet('k', 'v1', null);
    expect(v1).toBe((await kv.getEntry('k'))!.version);
    await expectReject(() => kv.compareAndSet('k', 'other', null), 'E_VERSION_CONFLICT', 'create over existing');
    expect(await kv.get('k')).toBe('v1');
    const v2 = await kv.compareAndSet('k', 'v2', v1);
    expect(v2).toBeGreaterThan(v1);
    await expectReject(() => kv.compareAndSet('k', 'stale', v1), 'E_VERSION_CONFLICT', 'stale version');
    await expectReject(() => kv.compareAndSet('k', 'future', v2 + 1000), 'E_VERSION_CONFLICT', 'future version');
    await expectReject(() => kv.compareAndSet('absent', 'x', v1), 'E_VERSION_CONFLICT', 'version on absent key');
    expect(await kv.get('k')).toBe('v2');
    expect(await kv.get('absent')).toBeNull();
    await expectReject(() => kv.compareAndSet('k', 'x', 0), 'E_INVALID_OPTION', 'version 0');
    await expectReject(() => kv.compareAndSet('k', 'x', 1.5), 'E_INVALID_OPTION', 'version 1.5');
    await expectReject(() => kv.compareAndSet('k', 42 as never, v2), 'E_INVALID_VALUE', 'non-string value');
    expect(await kv.getEntry('k')).toMatchObject({ value: 'v2', version: v2 });
  });

  it('compareAndSet: an expired or deleted key counts as absent; ttl applies', async (s) => {
    const kv = await s.kv();
    const expiring = await kv.compareAndSet('k', 'v', null, { ttl: SHORT_TTL });
    await sleep(PAST_SHORT_TTL);
    await expectReject(() => kv.compareAndSet('k', 'x', expiring), 'E_VERSION_CONFLICT', 'version of an expired key');
    await kv.compareAndSet('k', 'again', null);
    await kv.delete('k');
    await kv.compareAndSet('k', 'third', null);
    expect(await kv.get('k')).toBe('third');
  });

  it('compareAndSet: 8 concurrent increment loops on one key lose no update', { needs: ['atomicUpdates'] }, async (s) => {
    const stores = await s.many(4, (session) => session.kv());
    await stores[0]!.compareAndSet('counter', '0', null);
    const loops = 8;
    const incrementsPerLoop = 10;
    await parallel(loops, async (loop) => {
      const kv = stores[loop % stores.length]!;
      for (let i = 0; i < incrementsPerLoop; i++) {
        await retryOnConflict(async () => {
          const entry = await kv.getEntry('counter');
          await kv.compareAndSet('counter', String(Number(entry!.value) + 1), entry!.version);
        });
      }
    });
    expect(await stores[0]!.get('counter')).toBe(String(loops * incrementsPerLoop));
  });

  it('compareAndSet: of many concurrent creates exactly one wins', async (s) => {
    const stores = await s.many(4, (session) => session.kv());
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => stores[i % stores.length]!.compareAndSet('once', `writer ${i}`, null)),
    );
    const winners = results.filter((result) => result.status === 'fulfilled');
    expect(winners).toHaveLength(1);
    for (const result of results) {
      if (result.status === 'rejected') expect(result.reason).toMatchObject({ code: 'E_VERSION_CONFLICT' });
    }
  });
});
