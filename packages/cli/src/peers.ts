import { StowageError } from '@stowage/core';

/**
 * Drivers and adapter packages are optional peer dependencies: a user of PostgreSQL installs
 * `pg` and `@stowage/postgres`, never `mongodb`. Each is loaded when a URL needs it.
 */
export async function loadPeer<T>(name: string): Promise<T> {
  try {
    return (await import(name)) as T;
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_MODULE_NOT_FOUND' && String((error as Error).message).includes(`'${name}'`)) {
      throw new StowageError('E_INVALID_OPTION', `this URL needs the package ${name}: npm install ${name}`, { cause: error });
    }
    throw error;
  }
}
