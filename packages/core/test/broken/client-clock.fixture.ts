import { SLOW_VARIANTS, describeBrokenVariants } from './register-broken.js';

describeBrokenVariants(SLOW_VARIANTS);
