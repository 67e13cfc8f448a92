import { createPostgresBackend, Queue, Worker, type ConnectionOptions, type Processor, type WorkerOptions } from 'bullmq';
import type { QueueBackend } from '../backends.js';

// Queues and workers on whichever backend src/backends.ts chose: the same BullMQ classes, built with Redis
// connection options or with BullMQ's PostgreSQL backend factory. Nothing else in the project constructs them.

/** How many connections each BullMQ object may open to PostgreSQL (its LISTEN client comes on top). */
const POSTGRES_POOL_MAX = 4;

function redisConnection(url: string): ConnectionOptions {
  const parsed = new URL(url);
  return {
    host: parsed.hostname,
    port: Number(parsed.port || 6379),
    username: parsed.username || undefined,
    password: parsed.password ? decodeURIComponent(parsed.password) : undefined,
    db: parsed.pathname.length > 1 ? Number(parsed.pathname.slice(1)) : 0,
    tls: parsed.protocol === 'rediss:' ? {} : undefined,
    // Blocking connections must retry forever; BullMQ insists. v5 wire protocol, as BullMQ's own CI runs it.
    maxRetriesPerRequest: null,
    protocol: 2,
  };
}

function postgresConnection(backend: Extract<QueueBackend, { kind: 'postgres' }>) {
  // migrate: the schema is created (or brought up to date) under BullMQ's advisory lock on first use.
  return { connectionString: backend.databaseUrl, schema: backend.schema, migrate: true, max: POSTGRES_POOL_MAX };
}

export function createQueue(backend: QueueBackend, name: string): Queue {
  return backend.kind === 'redis'
    ? new Queue(name, { connection: redisConnection(backend.url), prefix: backend.prefix })
    // The same class either way; its type parameters only name the backend, and the project uses nothing that
    // one backend has and the other lacks.
    : new Queue(name, { connection: postgresConnection(backend) }, createPostgresBackend) as unknown as Queue;
}

export function createWorker(backend: QueueBackend, name: string, processor: Processor | null, options: Omit<WorkerOptions, 'connection' | 'prefix'>): Worker {
  return backend.kind === 'redis'
    ? new Worker(name, processor, { ...options, connection: redisConnection(backend.url), prefix: backend.prefix })
    : new Worker(name, processor, { ...options, connection: postgresConnection(backend) }, createPostgresBackend) as unknown as Worker;
}
