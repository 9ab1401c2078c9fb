export { tcpAnswers as answers } from '@skiplock/devdb';

/** The URL's host and port, without credentials. */
export function hostOf(url: string): string {
  return new URL(url).host;
}
