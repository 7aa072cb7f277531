/**
 * The stable, producer-side identity of a message.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { v7 as uuidv7 } from "uuid"

/**
 * A UUIDv7 assigned at dispatch. It never changes — not on retry, not on the move to the
 * failure queue and back — so it is the key consumers dedupe by.
 *
 * @since 0.1.0
 * @category models
 */
export const MessageId = Schema.UUID.pipe(Schema.brand("effect-outbox/MessageId"))

/**
 * @since 0.1.0
 * @category models
 */
export type MessageId = typeof MessageId.Type

/**
 * Generates a new time-ordered UUIDv7 message id.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (): MessageId => MessageId.make(uuidv7(), { disableValidation: true }) // uuid's v7 is valid by construction
