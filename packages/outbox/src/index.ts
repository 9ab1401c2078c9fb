export { defineOutbox, publish, publishMany, DEFAULT_MAX_PAYLOAD_BYTES } from './publish.js';
export type { Outbox, OutboxOptions, TopicSchemas, TypedMessage } from './publish.js';
export type { MessageInput } from './validate.js';
export { InvalidMessageError } from './errors.js';
export type { PublishIssue } from './errors.js';
export { createRelay } from './relay.js';
export type { Relay, RelayOptions, RelayPassResult, RetentionResult } from './relay.js';
export { encodePayload, failed, KEY_HEADER, TOPIC_HEADER } from './sink.js';
export type { Delivery, OutboxMessage, Sink } from './sink.js';
export { migrate, outboxMigrations } from './migrate.js';
export { outboxGrants } from './roles.js';
export {
  deadMessages,
  killPendingMessages,
  outboxCounts,
  pendingByTopic,
  retryDeadMessages,
} from './admin.js';
export type {
  DeadMessage,
  KilledMessage,
  OutboxCounts,
  PendingByTopic,
  TopicPending,
} from './admin.js';
