/**
 * Messages are `Schema.TaggedClass`es: the tag names the type, the schema encodes the body.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Text from "../internal/text.js"
import { MessageDecodeError, MessageEncodeError } from "./Errors.js"

/**
 * Any message value: a tagged object.
 *
 * @since 0.1.0
 * @category models
 */
export interface Tagged {
  readonly _tag: string
}

/**
 * A message class: a `Schema.TaggedClass` (or any schema with a static `_tag`) whose encoding
 * needs no services.
 *
 * @example
 * ```ts
 * class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", {
 *   orderId: Schema.Number, amount: Schema.Number
 * }) {}
 * ```
 *
 * @since 0.1.0
 * @category models
 */
export interface MessageClass<A extends Tagged = any, I = any> extends Schema.Schema<A, I, never> {
  readonly _tag: A["_tag"]
}

/**
 * The method a message class defines to give its messages an ordering key (see `Outbox.DispatchOptions`), e.g.
 * the aggregate's id, so that every dispatch of it is ordered without saying so:
 *
 * @example
 * ```ts
 * class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", { orderId: Schema.Int }) {
 *   [Message.orderingKey]() {
 *     return `order-${this.orderId}`
 *   }
 * }
 * ```
 *
 * @since 0.1.0
 * @category ordering
 */
export const orderingKey: unique symbol = Symbol.for("effect-outbox/Message/orderingKey") as never

/**
 * A message whose class derives its ordering key.
 *
 * @since 0.1.0
 * @category ordering
 */
export interface OrderingKeyed {
  readonly [orderingKey]: () => string
}

/**
 * The ordering key a message's class derives for it, if its class defines one.
 *
 * @since 0.1.0
 * @category ordering
 */
export const orderingKeyOf = (message: Tagged): unknown => {
  const derive = (message as Partial<OrderingKeyed>)[orderingKey]
  return typeof derive === "function" ? derive.call(message) : undefined
}

/**
 * Returns the message class of a message instance (its constructor), if it is a schema.
 *
 * @since 0.1.0
 * @category utils
 */
export const classOf = (message: Tagged): MessageClass | undefined => {
  const ctor = (message as { constructor?: unknown }).constructor
  return Schema.isSchema(ctor) ? (ctor as unknown as MessageClass) : undefined
}

const encoders = new WeakMap<MessageClass, (a: unknown) => Effect.Effect<string, ParseResult.ParseError>>()

/** One compiled JSON encoder per message class: building one is costly, and a class is dispatched many times. */
const encoderOf = (schema: MessageClass) => {
  let encoder = encoders.get(schema)
  if (encoder === undefined) {
    encoder = Schema.encodeUnknown(Schema.parseJson(schema))
    encoders.set(schema, encoder)
  }
  return encoder
}

/**
 * Encodes a message to its JSON body with its own schema. Fails with `MessageEncodeError` when
 * the value is not a schema class instance or does not satisfy its schema.
 *
 * @since 0.1.0
 * @category codec
 */
export const encodeBody = (message: Tagged): Effect.Effect<string, MessageEncodeError> => {
  const schema = classOf(message)
  if (schema === undefined) {
    return Effect.fail(
      new MessageEncodeError({
        type: String(message._tag),
        message: `Message ${String(message._tag)} is not an instance of a Schema class (use Schema.TaggedClass)`
      })
    )
  }
  return encoderOf(schema)(message).pipe(
    Effect.mapError((error) =>
      new MessageEncodeError({ type: message._tag, message: ParseResult.TreeFormatter.formatErrorSync(error) })
    )
  )
}

type Decoder<A> = (u: unknown) => Either.Either<A, ParseResult.ParseError>

const decoders = new WeakMap<MessageClass, Decoder<any>>()

/**
 * One compiled decoder per message class (building one per message would dominate the cost).
 *
 * For a `Schema.Class`, the schema's own decode validates the fields (the encoded side, with its
 * transformations and filters) and then calls the class constructor, which copies and re-merges the props —
 * most of the cost of a decode. The fields are decoded the same way here and the instance is made from the
 * class's prototype directly, once the first decoded message showed that this builds the same instance as
 * the constructor (same own properties, same values). A class whose constructor adds or changes properties
 * keeps the schema's decode.
 */
const decoderOf = <A extends Tagged>(schema: MessageClass<A>): Decoder<A> => {
  let decoder = decoders.get(schema)
  if (decoder === undefined) {
    decoder = makeDecoder(schema)
    decoders.set(schema, decoder)
  }
  return decoder as Decoder<A>
}

const makeDecoder = <A extends Tagged>(schema: MessageClass<A>): Decoder<A> => {
  const full = Schema.decodeUnknownEither(schema) as Decoder<A>
  const ast = schema.ast
  const ctor = schema as unknown as { new(props: unknown, disableValidation: boolean): A; prototype: object }
  if (ast._tag !== "Transformation" || typeof ctor !== "function" || typeof ctor.prototype !== "object") return full
  const fields = Schema.decodeUnknownEither(Schema.make(ast.from)) as Decoder<object>
  const build = (props: object): A => Object.assign(Object.create(ctor.prototype), props)
  let fast: boolean | undefined
  return (u) => {
    if (fast === false) return full(u)
    const props = fields(u)
    if (Either.isLeft(props)) return full(u)
    if (fast === true) return Either.right(build(props.right))
    // What the schema's decode does after the fields: the constructor, validation off.
    const constructed = new ctor(props.right, true)
    fast = sameInstance(constructed, build(props.right))
    return Either.right(constructed)
  }
}

const sameInstance = (a: object, b: object): boolean => {
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false
  const keys = Reflect.ownKeys(a)
  if (keys.length !== Reflect.ownKeys(b).length) return false
  return keys.every((key) =>
    Object.prototype.hasOwnProperty.call(b, key) &&
    (a as Record<PropertyKey, unknown>)[key] === (b as Record<PropertyKey, unknown>)[key]
  )
}

/**
 * Decodes a stored JSON body with the message class registered for its type. A body that is not JSON, nests
 * deeper than `maxJsonDepth` levels or does not satisfy the schema is a `MessageDecodeError` whose message is
 * bounded (`maxMessageLength`); decoding never throws.
 *
 * @since 0.1.0
 * @category codec
 */
export const decodeBody = <A extends Tagged>(
  schema: MessageClass<A>,
  body: string
): Either.Either<A, MessageDecodeError> => {
  const corrupt = (message: string) =>
    Either.left(
      new MessageDecodeError({ reason: "CorruptBody", type: Text.cut(schema._tag, Text.maxNameLength), message })
    )
  if (Text.nestedDeeperThan(body, Text.maxJsonDepth)) {
    return corrupt(`Body nests arrays or objects deeper than ${maxJsonDepth} levels`)
  }
  let json: unknown
  try {
    json = JSON.parse(body)
  } catch (error) {
    return corrupt(
      Text.cut(
        `Body is not valid JSON: ${error instanceof Error ? error.message : String(error)}`,
        Text.maxMessageLength
      )
    )
  }
  const invalid = (message: string) =>
    new MessageDecodeError({ reason: "InvalidBody", type: Text.cut(schema._tag, Text.maxNameLength), message })
  return Text.guardStack(
    () =>
      decoderOf(schema)(json).pipe(
        Either.mapLeft((error) =>
          invalid(Text.cut(ParseResult.TreeFormatter.formatErrorSync(error), Text.maxMessageLength))
        )
      ),
    () => Either.left(invalid("Body is too large or too deeply nested to be checked against its schema"))
  )
}

/**
 * Arrays and objects in a stored body or headers nest at most this deep; deeper ones are corrupt (decoding
 * and reporting them would overflow the stack).
 *
 * @since 0.1.0
 * @category constants
 */
export const maxJsonDepth: number = Text.maxJsonDepth
