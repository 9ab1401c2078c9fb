// A TypeScript job module for `skiplock worker`: without tsx installed, the CLI must say how to
// load it instead of failing inside Node.
import { defineJob } from '@skiplock/queue';
import { z } from 'zod';

export const noop = defineJob({
  type: 'noop',
  payload: z.object({}),
  handler: async () => {},
});
