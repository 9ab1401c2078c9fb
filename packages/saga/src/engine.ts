import type { AnyJobDefinition, Client, Logger, Metrics } from '@skiplock/queue';
import type pg from 'pg';
import type { AnySagaDefinition, StepSpec } from './define.js';

/** Where a crash-injection hook is called; see `@skiplock/saga/testing`. */
export interface FaultPoint {
  sagaId: string;
  sagaName: string;
  step: string;
  kind: 'step' | 'compensation';
  attempt: number;
  /** `before` the user's code runs, or `after` it returned and before its completion commits. */
  phase: 'before' | 'after';
}

/** Throw from it to fail an attempt at that point. */
export type FaultHook = (point: FaultPoint) => void | Promise<void>;

/** One registered definition with the job types its steps run as. */
export interface SagaEntry {
  def: AnySagaDefinition;
  steps: readonly StepSpec[];
  runJobs: AnyJobDefinition[];
  compensateJobs: (AnyJobDefinition | null)[];
  timeoutJobs: (AnyJobDefinition | null)[];
  /** Wait steps by the signal name they wait for. */
  signals: ReadonlyMap<string, StepSpec>;
}

/** What the transitions and job handlers share. */
export interface Engine {
  pool: pg.Pool;
  client: Client;
  logger: Logger;
  metrics: Metrics;
  entries: ReadonlyMap<string, SagaEntry>;
  faults: FaultHook | null;
}

export const entryKey = (name: string, version: number) => `${name}@${version}`;

export const stepKey = (sagaId: string, step: string) => `saga:${sagaId}:${step}`;
export const compensationKey = (sagaId: string, step: string) =>
  `saga:${sagaId}:compensate:${step}`;
export const timeoutKey = (sagaId: string, step: string) => `saga:${sagaId}:${step}:timeout`;

/** Job types name the saga, its version and the step, so an unknown version dies as unknown. */
export const jobType = (
  def: AnySagaDefinition,
  step: string,
  what: 'run' | 'compensate' | 'timeout',
) => `saga:${def.name}:v${def.version}:${step}${what === 'run' ? '' : `:${what}`}`;
