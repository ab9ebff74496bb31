// Not from the docs: the store "Cleanup" works on, in a later process after the quick start
// (whose own store the usage examples closed): the quick start's database and table.
import { postgres } from '@stowage/postgres';

export const store = postgres('postgresql://localhost/mydb');
