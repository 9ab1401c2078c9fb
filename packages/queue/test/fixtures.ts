import { z } from 'zod';
import { defineJob } from '../src/index.js';

export const silent = { level: 'silent' } as const;

export const sendEmail = defineJob({
  type: 'send-email',
  payload: z.object({ to: z.string().email(), amount: z.number().int() }),
  handler: async () => {},
});
