import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's Chromium (`apt-get install chromium`; `.ci/run` installs it when missing). */
export const CHROMIUM_PATH = process.env.SKIPLOCK_CHROMIUM ?? '/usr/bin/chromium';

/**
 * Whether the browser tests run: in CI a missing Chromium fails them (`.ci/run` installs it); on
 * a developer's machine without it they report themselves skipped, so `pnpm test` still passes
 * on a machine with only Node and pnpm.
 */
export function chromiumAvailable(): boolean {
  if (existsSync(CHROMIUM_PATH)) return true;
  if (process.env.CI) {
    throw new Error(
      `no Chromium at ${CHROMIUM_PATH}; CI runs the dashboard's browser tests for real`,
    );
  }
  console.warn(
    `no Chromium at ${CHROMIUM_PATH}: the dashboard's browser tests are skipped (apt-get install chromium, or set SKIPLOCK_CHROMIUM)`,
  );
  return false;
}

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
