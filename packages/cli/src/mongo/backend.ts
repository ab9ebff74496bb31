import { StowageError } from '@stowage/core';
import type { OpenOptions } from '../backend.js';
import type { Backend } from '../model.js';

export const MongoBackend = {
  async open(_url: string, _options: OpenOptions): Promise<Backend> {
    throw new StowageError('E_INVALID_OPTION', 'not yet');
  },
};
