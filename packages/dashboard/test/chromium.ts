import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's Chromium (`apt-get install chromium`; `.ci/run` installs it when missing). */
export const CHROMIUM_PATH = process.env.SKIPLOCK_CHROMIUM ?? '/usr/bin/chromium';

/**
 * Launches the machine's Chromium headless through playwright-core, which downloads no browser
 * of its own. No sandbox: the tests run as root in CI, where Chromium's sandbox refuses to start.
 */
export function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    throw new Error(
      `no Chromium at ${CHROMIUM_PATH}: install Debian's (apt-get install chromium, as .ci/run does) or set SKIPLOCK_CHROMIUM`,
    );
  }
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
}
