/** An address the quoting schema refuses (it ends with `@`), to look for in logs and spans. */
export const REFUSED_EMAIL = 'alice.secret-token@';

/**
 * `{ email }`, refused when the address ends with `@`, by a validator whose message quotes the
 * refused value, as valibot's do ("Received ..."): what must stay out of logs and spans.
 */
export const quotingEmail = {
  '~standard': {
    version: 1 as const,
    vendor: 'test',
    types: undefined as unknown as { input: { email: string }; output: { email: string } },
    validate: (value: unknown) => {
      const email = (value as { email?: unknown } | null)?.email;
      return typeof email === 'string' && !email.endsWith('@')
        ? { value: { email } }
        : {
            issues: [
              { message: `Invalid email: Received ${JSON.stringify(email)}`, path: ['email'] },
            ],
          };
    },
  },
};
