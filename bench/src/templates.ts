import { freshDatabase, withAdmin, type FreshDatabase } from './server.js';

const built = new Map<string, FreshDatabase>();

/**
 * A fresh database with `install` already applied: installed once into a template database per
 * key, then cloned for every run, so runs start equal and migrations stay out of the loop.
 */
export async function installedDatabase(
  adminUrl: string,
  key: string,
  install: (url: string) => Promise<void>,
): Promise<FreshDatabase> {
  let template = built.get(key);
  if (!template) {
    template = await freshDatabase(adminUrl);
    await install(template.url);
    // A template must have no connections; a library may still be closing its pool.
    await withAdmin(adminUrl, (c) =>
      c.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [
        template!.name,
      ]),
    );
    built.set(key, template);
  }
  return freshDatabase(adminUrl, template.name);
}

export async function dropTemplates(): Promise<void> {
  for (const t of built.values()) await t.drop();
  built.clear();
}
