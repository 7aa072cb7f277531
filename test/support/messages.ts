import * as Schema from "effect/Schema"

export class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", {
  orderId: Schema.Int,
  amount: Schema.Number
}) {}

export class OrderShipped extends Schema.TaggedClass<OrderShipped>()("OrderShipped", {
  orderId: Schema.Int,
  carrier: Schema.NonEmptyString
}) {}
