import { OTHER_VARIANTS, describeBrokenVariants } from './register-broken.js';

describeBrokenVariants(OTHER_VARIANTS);
