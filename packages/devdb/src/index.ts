export { startDatabase, type DevDatabase, type DatabaseSource } from './start.js';
export { startEmbeddedPostgres, type EmbeddedOptions, type EmbeddedServer } from './embedded.js';
export { dockerAvailable } from './docker.js';
export {
  cloneDatabase,
  createDatabase,
  dropDatabase,
  listDatabases,
  withDatabaseName,
} from './admin.js';
export { DevDatabaseError } from './errors.js';
export { tcpAnswers } from './answers.js';
