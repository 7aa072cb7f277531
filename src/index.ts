/**
 * effect-outbox: a transactional outbox and message worker for Effect 3 on PostgreSQL and MySQL/MariaDB. The command line
 * (`effect-outbox/Cli`), the RabbitMQ transport (`effect-outbox/AmqpTransport`), the metrics endpoint
 * (`effect-outbox/MetricsServer`) and the conformance suites (`effect-outbox/testing`) are subpaths of their own,
 * so importing the root loads neither `@effect/cli`, `amqplib` nor OpenTelemetry.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as Envelope from "./domain/Envelope.js"
/** @since 0.1.0 */
export * from "./domain/Errors.js"
/** @since 0.1.0 */
export * as Headers from "./domain/Headers.js"
/** @since 0.1.0 */
export * as IdempotencyKey from "./domain/IdempotencyKey.js"
/** @since 0.1.0 */
export * as Identifier from "./domain/Identifier.js"
/** @since 0.1.0 */
export * as Message from "./domain/Message.js"
/** @since 0.1.0 */
export * as MessageId from "./domain/MessageId.js"
/** @since 0.1.0 */
export * as Outcome from "./domain/Outcome.js"
/** @since 0.1.0 */
export * as RetryDelay from "./domain/RetryDelay.js"
/** @since 0.1.0 */
export * as Routing from "./domain/Routing.js"
/** @since 0.1.0 */
export * from "./domain/SyncErrors.js"
/** @since 0.1.0 */
export * as HealthStatus from "./programs/observability/HealthStatus.js"
/** @since 0.1.0 */
export * as OutboxMetrics from "./programs/OutboxMetrics.js"
/** @since 0.1.0 */
export * as WorkerHealth from "./programs/WorkerHealth.js"
/** @since 0.1.0 */
export * as Handlers from "./services/Handlers.js"
/** @since 0.1.0 */
export * as IdempotencyStore from "./services/IdempotencyStore.js"
/** @since 0.1.0 */
export * as Outbox from "./services/Outbox.js"
/** @since 0.1.0 */
export * as RetryStrategy from "./services/RetryStrategy.js"
/** @since 0.1.0 */
export * as Transport from "./services/Transport.js"
/** @since 0.1.0 */
export * as TransportAdmin from "./services/TransportAdmin.js"
/** @since 0.1.0 */
export * as MemoryIdempotencyStore from "./layers/MemoryIdempotencyStore.js"
/** @since 0.1.0 */
export * as MemoryTransport from "./layers/MemoryTransport.js"
/** @since 0.1.0 */
export * as MysqlIdempotencyStore from "./layers/MysqlIdempotencyStore.js"
/** @since 0.1.0 */
export * as MysqlTransport from "./layers/MysqlTransport.js"
/** @since 0.1.0 */
export * as PgCompaction from "./layers/PgCompaction.js"
/** @since 0.1.0 */
export * as PgIdempotencyStore from "./layers/PgIdempotencyStore.js"
/** @since 0.1.0 */
export * as PgTransport from "./layers/PgTransport.js"
/** @since 0.1.0 */
export * as ScheduleRetryStrategy from "./layers/ScheduleRetryStrategy.js"
/** @since 0.1.0 */
export * as SyncTransport from "./layers/SyncTransport.js"
/** @since 0.1.0 */
export * as TransportRouter from "./layers/TransportRouter.js"
/** @since 0.1.0 */
export * as Forwarder from "./programs/Forwarder.js"
/** @since 0.1.0 */
export * as IdempotencyPurge from "./programs/IdempotencyPurge.js"
/** @since 0.1.0 */
export * as Worker from "./programs/worker/Worker.js"
