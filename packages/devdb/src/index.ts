export { startDatabase, type DevDatabase, type DatabaseSource } from './start.js';
export { startEmbeddedPostgres, type EmbeddedServer } from './embedded.js';
export { dockerAvailable } from './docker.js';
export { cloneDatabase, createDatabase, dropDatabase, withDatabaseName } from './admin.js';
